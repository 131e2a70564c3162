package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/podvisor/podvisor/internal/agent"
	"os"
	"os/signal"
	"syscall"

	"github.com/podvisor/podvisor/internal/controlplane"
	"github.com/podvisor/podvisor/internal/up"
)

func runAgent(args []string) error {
	fs := flag.NewFlagSet("podvisor agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: podvisor agent --server-data-dir DIR --node-name N --data-dir D [flags]

Runs one more node agent on this machine, joining the running 'podvisor up'
whose data directory is DIR: a local join mode for testing multi-node
behaviour (it issues its own certificates with the server's CA key).

`)
		fs.PrintDefaults()
	}
	var o up.AgentOptions
	fs.StringVar(&o.ServerDataDir, "server-data-dir", "", "data directory of the running podvisor up to join")
	fs.StringVar(&o.DataDir, "data-dir", "", "this agent's own data directory (certificates, pods)")
	fs.StringVar(&o.NodeName, "node-name", "", "name of the node")
	fs.IntVar(&o.AgentPort, "agent-port", 10250, "port of this agent's API (must differ from the server's agent)")
	fs.StringVar(&o.ConfigFile, "config", "", "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1)")
	fs.DurationVar(&o.EvictionMonitoringPeriod, "eviction-monitoring-period", 0, "for tests: time between node-pressure eviction rounds (0: upstream's 10s)")
	fs.StringVar(&o.Runtime.Kind, "runtime", agent.RuntimeContainerd, "container runtime: containerd (OCI images, on a containerd podvisor runs; needs root, runc and the CNI plugins) or process (host processes, no images)")
	fs.StringVar(&o.Runtime.Endpoint, "container-runtime-endpoint", "", "an existing CRI runtime's socket (unix:///…) to use instead of podvisor's own containerd")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", controlplane.DefaultClusterCIDR, "the cluster's pod network, as the server's --cluster-cidr: routed between nodes, not masqueraded")
	fs.BoolVar(&o.Verbose, "v", false, "also print logs to stderr (they always go to DATA_DIR/podvisor.log)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("agent takes no arguments, got %q", fs.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return up.RunAgent(ctx, o, os.Stdout, os.Stderr)
}
