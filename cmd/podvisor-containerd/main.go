// Command podvisor-containerd is the containerd podvisor runs for its
// containerd runtime: containerd 2 with only the plugins the CRI needs
// (internal/runtime/containerd/daemon). podvisor and podvisor-agent start it
// from beside themselves as `podvisor-containerd --config FILE`; it is not
// for people.
package main

import (
	"os"

	"github.com/podvisor/podvisor/internal/runtime/containerd/daemon"
)

func main() { os.Exit(daemon.Main(os.Args[1:])) }
