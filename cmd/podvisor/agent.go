package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/podvisor/podvisor/internal/agent"

	"github.com/podvisor/podvisor/internal/cli/up"
	"github.com/podvisor/podvisor/internal/controlplane"
)

// agentFlags defines agent's flags into o and hashes (--ca-cert-hash).
func agentFlags(o *up.AgentOptions, hashes *string) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: podvisor agent --node-name N --data-dir D JOIN [flags]

Runs a node agent that joins a cluster; JOIN is one of:
  --server https://HOST:6443 --token T [--ca-cert-hash sha256:H]
        the kubelet's TLS bootstrap: token discovery of the cluster CA (pinned
        by its hash), a node client certificate from a CSR (renewed before it
        expires) and a serving certificate from a kubelet-serving CSR; works
        with 'podvisor server' ('podvisor token create --print-join-command')
        and kubeadm-style clusters. Later starts need no token.
  --kubeconfig FILE
        credentials made elsewhere (the serving certificate still comes from a CSR)
  --server-data-dir DIR
        testing on one machine: joins the running 'podvisor up' whose data
        directory is DIR, signing its own certificates with that CA key

`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.Server, "server", "", "API server to join, https://HOST:PORT")
	fs.StringVar(&o.Token, "token", "", "bootstrap token, ID.SECRET ('podvisor token create')")
	fs.StringVar(hashes, "ca-cert-hash", "", "sha256:HEX pin(s) of the cluster CA's public key, comma-separated")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "join with this kubeconfig's credentials")
	fs.StringVar(&o.NodeIP, "node-ip", "", "the node's address (default: the address of the default route's interface)")
	fs.StringVar(&o.ServerDataDir, "server-data-dir", "", "data directory of a running podvisor up on this machine to join (testing)")
	fs.StringVar(&o.DataDir, "data-dir", "", "this agent's own data directory (certificates, pods)")
	fs.StringVar(&o.NodeName, "node-name", "", "name of the node")
	fs.IntVar(&o.AgentPort, "agent-port", 10250, "port of this agent's API (must differ from the server's agent)")
	fs.StringVar(&o.ConfigFile, "config", "", "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1)")
	fs.DurationVar(&o.EvictionMonitoringPeriod, "eviction-monitoring-period", 0, "for tests: time between node-pressure eviction rounds (0: upstream's 10s)")
	fs.DurationVar(&o.GCPeriod, "gc-period", 0, "for tests: time between image and container garbage collection rounds (0: upstream's 5m and 1m)")
	fs.StringVar(&o.Runtime.Kind, "runtime", agent.RuntimeContainerd, "container runtime: containerd (OCI images, on a containerd podvisor runs; needs root, runc and the CNI plugins) or process (host processes, no images)")
	fs.StringVar(&o.Runtime.Endpoint, "container-runtime-endpoint", "", "an existing CRI runtime's socket (unix:///…) to use instead of podvisor's own containerd")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", controlplane.DefaultClusterCIDR, "the cluster's pod network, as the server's --cluster-cidr: routed between nodes, not masqueraded")
	fs.BoolVar(&o.DisableServiceProxy, "disable-service-proxy", false, "do not run the embedded kube-proxy (for clusters that bring their own service proxy, or a second node on one machine)")
	clusterDNSFlags(fs, &o.ClusterDNS)
	localStorageFlags(fs, &o.LocalStorage, true)
	fs.BoolVar(&o.Verbose, "v", false, "also print logs to stderr (they always go to DATA_DIR/podvisor.log)")
	return fs
}

func runAgent(args []string) error {
	var o up.AgentOptions
	var hashes string
	fs := agentFlags(&o, &hashes)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("agent takes no arguments, got %q", fs.Args())
	}
	for _, h := range strings.Split(hashes, ",") {
		if h = strings.TrimSpace(h); h != "" {
			o.CAHashes = append(o.CAHashes, h)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return up.RunAgent(ctx, o, os.Stdout, os.Stderr)
}
