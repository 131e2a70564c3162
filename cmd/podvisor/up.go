package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/podvisor/podvisor/internal/agent"
	"github.com/podvisor/podvisor/internal/cluster/ranges"

	"github.com/podvisor/podvisor/internal/cli/agentup"
	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/up"
)

// upFlags defines up's flags into o.
func upFlags(o *up.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor up", flag.ContinueOnError)
	fs.StringVar(&o.DataDir, "data-dir", datadir.Default(), "directory for all state (etcd, PKI, pods)")
	fs.IntVar(&o.APIPort, "api-port", 6443, "port of the Kubernetes API (on every address, or on 127.0.0.1 when the machine has no default route)")
	fs.IntVar(&o.AgentPort, "agent-port", 10250, "port of the node agent's API (logs, exec)")
	fs.StringVar(&o.NodeName, "node-name", "", "name of the node (default: the hostname)")
	fs.IntVar(&o.TerminatedPodGCThreshold, "terminated-pod-gc-threshold", 12500, "terminated pods kept before the pod GC deletes the oldest")
	fs.IntVar(&o.EtcdClientPort, "etcd-client-port", 0, "embedded etcd client port on 127.0.0.1 (default: the recorded one, else 2379 or a free port)")
	fs.IntVar(&o.EtcdPeerPort, "etcd-peer-port", 0, "embedded etcd peer port on 127.0.0.1 (default: the recorded one, else 2380 or a free port)")
	fs.DurationVar(&o.NodeMonitorGracePeriod, "node-monitor-grace-period", 0, "for tests: how long a silent node stays Ready before the controller manager marks it NotReady (0: upstream default)")
	agentup.NodeConfigFlags(fs, &o.NodeConfigOptions)
	fs.StringVar(&o.Runtime.Kind, "runtime", agent.RuntimeContainerd, "container runtime: containerd (OCI images, on a containerd podvisor runs; needs root, runc and the CNI plugins) or process (host processes, no images)")
	fs.StringVar(&o.Runtime.Endpoint, "container-runtime-endpoint", "", "an existing CRI runtime's socket (unix:///…) to use instead of podvisor's own containerd")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", ranges.DefaultClusterCIDR, "pod network; each node gets a /24 of it")
	snapshotFlags(fs, &o.Snapshots)
	fs.BoolVar(&o.DisableServiceProxy, "disable-service-proxy", false, "do not run the embedded kube-proxy (for clusters that bring their own service proxy)")
	fs.BoolVar(&o.SecretsEncryption, "secrets-encryption", false, "encrypt Secrets at rest (secretbox; the key is made in DATA_DIR/encryption-config.yaml and used at every later start)")
	agentup.ClusterDNSFlags(fs, &o.ClusterDNS)
	agentup.LocalStorageFlags(fs, &o.LocalStorage, true)
	metricsServerFlags(fs, &o.MetricsServer)
	fs.BoolVar(&o.Verbose, "v", false, "also print component logs to stderr (they always go to DATA_DIR/podvisor.log)")
	return fs
}

func runUp(args []string) error {
	var o up.Options
	fs := upFlags(&o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("up takes no arguments, got %q", fs.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return up.Run(ctx, o, os.Stdout, os.Stderr)
}
