package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/internal/agent/shutdown"
	"github.com/podvisor/podvisor/internal/cli/datadir"
)

const nodeUsage = `Usage:
  podvisor node shutdown [flags]   shut the node down gracefully, as systemd-logind's
                                   PrepareForShutdown does: NotReady, new pods rejected,
                                   running pods stopped by priority band
  podvisor node cancel [flags]     cancel it: the node is Ready again
  podvisor node status [flags]     whether a shutdown is under way, and the last one's times
`

type nodeOptions struct {
	dataDir, node, agentHost string
	wait                     bool
}

// nodeFlags defines node VERB's flags into o.
func nodeFlags(verb string, o *nodeOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor node "+verb, flag.ContinueOnError)
	fs.StringVar(&o.dataDir, "data-dir", datadir.Default(), "data directory of the running `podvisor up` (for its admin certificate)")
	fs.StringVar(&o.node, "node", "", "node whose agent to ask (default: the node of --data-dir)")
	fs.StringVar(&o.agentHost, "agent-host", "127.0.0.1", "address of the agent (its port is read from the Node)")
	if verb == "shutdown" {
		fs.BoolVar(&o.wait, "wait", false, "return only once every pod is stopped (then the machine may power off)")
	}
	return fs
}

func runNode(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, nodeUsage)
		if len(args) == 0 {
			os.Exit(2)
		}
		return nil
	}
	verb := args[0]
	if verb != "shutdown" && verb != "cancel" && verb != "status" {
		fmt.Fprintf(os.Stderr, "podvisor node: unknown command %q\n\n%s", verb, nodeUsage)
		os.Exit(2)
	}
	var o nodeOptions
	fs := nodeFlags(verb, &o)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	dir, nodeName, host, wait := &o.dataDir, &o.node, &o.agentHost, &o.wait
	if fs.NArg() > 0 {
		return fmt.Errorf("node %s takes no arguments, got %q", verb, fs.Args())
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if *nodeName == "" {
		st, err := datadir.Open(abs)
		if err != nil {
			return err
		}
		if st.NodeName == "" {
			return fmt.Errorf("data dir %s has no node yet: start `podvisor up` first, or pass --node", abs)
		}
		*nodeName = st.NodeName
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := shutdown.NewClient(ctx, datadir.AdminKubeconfig(abs), *nodeName, *host)
	if err != nil {
		return err
	}
	var st shutdown.Status
	switch verb {
	case "shutdown":
		if st, err = c.Shutdown(ctx); err != nil {
			return err
		}
		fmt.Printf("node %s is shutting down: pods are being stopped (%s)\n", *nodeName, strings.Join(st.Bands, ", "))
		if *wait {
			if st, err = waitStopped(ctx, c, st); err != nil {
				return err
			}
			if !st.ShuttingDown {
				return fmt.Errorf("the shutdown of node %s was cancelled", *nodeName)
			}
			fmt.Printf("node %s: every pod is stopped\n", *nodeName)
		}
	case "cancel":
		if st, err = c.Cancel(ctx); err != nil {
			return err
		}
		fmt.Printf("node %s: shutdown cancelled; the node is Ready again\n", *nodeName)
	case "status":
		if st, err = c.Status(ctx); err != nil {
			return err
		}
		printStatus(*nodeName, st)
	}
	return nil
}

// waitStopped polls until the shutdown that started at st.StartTime has ended.
func waitStopped(ctx context.Context, c *shutdown.Client, st shutdown.Status) (shutdown.Status, error) {
	start := st.StartTime
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if !st.ShuttingDown || (st.EndTime != nil && start != nil && !st.EndTime.Before(*start)) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-t.C:
		}
		var err error
		if st, err = c.Status(ctx); err != nil {
			return st, err
		}
	}
}

func printStatus(node string, st shutdown.Status) {
	switch {
	case !st.Enabled:
		fmt.Printf("node %s: graceful shutdown is not enabled (no shutdownGracePeriod in the agent's configuration)\n", node)
	case st.ShuttingDown:
		fmt.Printf("node %s: shutting down since %s\n", node, st.StartTime.Format(time.RFC3339))
	default:
		fmt.Printf("node %s: running; graceful shutdown bands %s\n", node, strings.Join(st.Bands, ", "))
	}
	if st.StartTime != nil {
		fmt.Printf("last shutdown started %s", st.StartTime.Format(time.RFC3339))
		if st.EndTime != nil {
			fmt.Printf(", ended %s", st.EndTime.Format(time.RFC3339))
		}
		fmt.Println()
	}
}
