package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/podvisor/podvisor/internal/cli/agentup"
	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/up"
	"github.com/podvisor/podvisor/internal/cluster/ranges"
)

const serverUsage = `Usage: podvisor server [flags]

Runs the control plane alone (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler), for nodes that join it from other machines:

  podvisor token create --print-join-command     (on this machine)
  podvisor agent --server https://ADDR:6443 --token T --ca-cert-hash sha256:H \
      --node-name N --data-dir D                  (on each node)

`

// serverFlags defines server's flags into o and sans (--tls-san).
func serverFlags(o *up.ServerOptions, sans *string) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor server", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), serverUsage); fs.PrintDefaults() }
	fs.StringVar(&o.DataDir, "data-dir", datadir.Default(), "directory for all state (etcd, PKI)")
	fs.IntVar(&o.APIPort, "api-port", 6443, "port of the Kubernetes API")
	fs.StringVar(&o.BindAddress, "bind-address", "0.0.0.0", "address the Kubernetes API listens on")
	fs.StringVar(&o.AdvertiseAddress, "advertise-address", "", "address nodes and pods reach the API at (default: the bind address, else the default route's interface's)")
	fs.StringVar(sans, "tls-san", "", "more names and IPs for the API's certificate, comma-separated")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", ranges.DefaultClusterCIDR, "pod network; each node gets a /24 of it")
	fs.IntVar(&o.TerminatedPodGCThreshold, "terminated-pod-gc-threshold", 12500, "terminated pods kept before the pod GC deletes the oldest")
	fs.IntVar(&o.EtcdClientPort, "etcd-client-port", 0, "embedded etcd client port on 127.0.0.1 (default: the recorded one, else 2379 or a free port)")
	fs.IntVar(&o.EtcdPeerPort, "etcd-peer-port", 0, "embedded etcd peer port on 127.0.0.1 (default: the recorded one, else 2380 or a free port)")
	fs.DurationVar(&o.NodeMonitorGracePeriod, "node-monitor-grace-period", 0, "how long a silent node stays Ready before it is marked NotReady (0: upstream's default)")
	fs.DurationVar(&o.SigningDuration, "cluster-signing-duration", 0, "lifetime of the node certificates the controller manager signs (0: a year); nodes renew theirs at 70-90% of it")
	snapshotFlags(fs, &o.Snapshots)
	fs.BoolVar(&o.SecretsEncryption, "secrets-encryption", false, "encrypt Secrets at rest (secretbox; the key is made in DATA_DIR/encryption-config.yaml and used at every later start)")
	agentup.ClusterDNSFlags(fs, &o.ClusterDNS)
	agentup.LocalStorageFlags(fs, &o.LocalStorage, false)
	metricsServerFlags(fs, &o.MetricsServer)
	fs.BoolVar(&o.Verbose, "v", false, "also print component logs to stderr (they always go to DATA_DIR/podvisor.log)")
	return fs
}

func runServer(args []string) error {
	var o up.ServerOptions
	var sans string
	fs := serverFlags(&o, &sans)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("server takes no arguments, got %q", fs.Args())
	}
	for _, s := range strings.Split(sans, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.SANs = append(o.SANs, s)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return up.RunServer(ctx, o, os.Stdout, os.Stderr)
}
