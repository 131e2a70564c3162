// Command podvisor-agent is `podvisor agent` without the control plane: the
// node agent with the node's services (cluster DNS, local-path provisioner,
// kube-proxy), for a node that joins a cluster. `podvisor agent` runs it
// when it is installed beside podvisor; its flags are the same. It also
// serves the hidden subcommand the agent starts itself as (the process
// runtime's shim), so that it too does without the control plane's pages.
// Its containerd is podvisor-containerd, installed beside it.
package main

import (
	"fmt"
	"os"

	"github.com/podvisor/podvisor/internal/cli/agentup"
	"github.com/podvisor/podvisor/internal/runtime/process"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case process.ShimCommand:
			os.Exit(process.RunShim(args[1:]))
		case "agent": // as `podvisor agent`
			args = args[1:]
		}
	}
	// A config file may hold other subcommands' keys too; `podvisor agent`
	// has checked them against every subcommand before it ran this binary.
	o, err := agentup.ParseArgs(args, func(string) bool { return true })
	if err == nil {
		err = agentup.RunAgentUntilSignal(o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "podvisor: %v\n", err) // as podvisor agent says it
		os.Exit(1)
	}
}
