package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/reset"
)

const resetUsage = `Usage: podvisor reset [--data-dir DIR]

Stops and removes what a stopped podvisor left running for its data directory:
every pod sandbox and container (containers outlive podvisor, which re-adopts
them at its next start), their shims, mounts and network namespaces,
containerd's state under /run/podvisor, and the pod network's bridge,
masquerade rule and routes to other nodes' pods, and the service proxy's
rules (kube-proxy --cleanup: all of this machine's, unless another podvisor
runs here). The data directory (etcd, PKI, images) is kept: remove it
too for a fresh start. Refuses while podvisor runs with that data directory.
`

// resetFlags defines reset's flags.
func resetFlags(dataDir *string) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor reset", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, resetUsage); fs.PrintDefaults() }
	fs.StringVar(dataDir, "data-dir", datadir.Default(), "data directory of the stopped podvisor")
	return fs
}

func runReset(args []string) error {
	dir := new(string)
	fs := resetFlags(dir)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("reset takes no arguments, got %q", fs.Args())
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("reset needs root, as podvisor does")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	res, err := reset.Run(ctx, *dir, log)
	if err != nil {
		return err
	}
	fmt.Printf("removed %d pod sandbox(es), killed %d process(es), unmounted %d mount(s)\n", res.Sandboxes, res.Killed, res.Unmounted)
	return nil
}
