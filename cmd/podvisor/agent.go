package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/podvisor/podvisor/internal/cli/agentup"
)

// runAgent checks the command line and config file against every
// subcommand's flags, then runs the agent: in the agent-only binary beside
// this one when it is installed (same arguments and environment, same
// process: exec), which links no control plane and so idles in a fraction of
// this binary's memory; in this binary otherwise. The command line stays
// `podvisor agent …`, as ps, reset and service managers know it.
func runAgent(args []string) error {
	o, err := agentup.ParseArgs(args, knownFlag)
	if err != nil {
		return err
	}
	if exe, err := os.Executable(); err == nil {
		if lean := agentup.BinaryBeside(exe); lean != "" {
			err := syscall.Exec(lean, append([]string{os.Args[0], "agent"}, args...), os.Environ())
			return fmt.Errorf("exec %s: %w", lean, err)
		}
	}
	return agentup.RunAgentUntilSignal(o)
}
