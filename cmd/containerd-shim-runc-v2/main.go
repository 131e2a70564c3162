// Command containerd-shim-runc-v2 is containerd's runc shim, for the
// containerd podvisor runs: podvisor looks for it next to its own binary.
package main

import "github.com/podvisor/podvisor/internal/runtime/containerd/shim"

func main() { shim.Main() }
