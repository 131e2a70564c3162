package main

import (
	"os"

	"github.com/podvisor/podvisor/internal/runtime/process"
)

// shimCommand runs the supervisor of one container; the agent starts it as
// `podvisor __shim <instance dir>` (process.ShimCommand). Not for people.
const shimCommand = "__shim"

func shim(args []string) {
	os.Exit(process.RunShim(args))
}
