// Command podvisor-shim supervises one container for podvisor's process
// runtime. It is `podvisor __shim` without the embedded Kubernetes: starting
// it costs a few milliseconds and megabytes instead of the full binary's
// package initialisation, once per container. Not for people.
package main

import (
	"os"

	"github.com/podvisor/podvisor/internal/runtime/process"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == process.ShimCommand {
		args = args[1:]
	}
	os.Exit(process.RunShim(args))
}
