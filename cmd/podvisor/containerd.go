package main

import (
	"os"

	"github.com/podvisor/podvisor/internal/runtime/containerd"
)

// containerdCommand runs containerd itself; podvisor starts its containerd
// as `podvisor containerd --config FILE` (containerd.Start). Not for people.
const containerdCommand = "containerd"

func runContainerd(args []string) {
	os.Exit(containerd.Main(args))
}
