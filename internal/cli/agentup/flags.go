package agentup

import (
	"flag"
	"fmt"
	"strings"

	"github.com/podvisor/podvisor/internal/agent"
	"github.com/podvisor/podvisor/internal/cli/flagfile"
	"github.com/podvisor/podvisor/internal/cluster/ranges"
)

// Flags defines agent's flags into o and hashes (--ca-cert-hash).
func Flags(o *AgentOptions, hashes *string) *flag.FlagSet {
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
	NodeConfigFlags(fs, &o.NodeConfigOptions)
	fs.StringVar(&o.Runtime.Kind, "runtime", agent.RuntimeContainerd, "container runtime: containerd (OCI images, on a containerd podvisor runs; needs root, runc and the CNI plugins) or process (host processes, no images)")
	fs.StringVar(&o.Runtime.Endpoint, "container-runtime-endpoint", "", "an existing CRI runtime's socket (unix:///…) to use instead of podvisor's own containerd")
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", ranges.DefaultClusterCIDR, "the cluster's pod network, as the server's --cluster-cidr: routed between nodes, not masqueraded")
	fs.BoolVar(&o.DisableServiceProxy, "disable-service-proxy", false, "do not run the embedded kube-proxy (for clusters that bring their own service proxy, or a second node on one machine)")
	ClusterDNSFlags(fs, &o.ClusterDNS)
	LocalStorageFlags(fs, &o.LocalStorage, true)
	fs.BoolVar(&o.Verbose, "v", false, "also print logs to stderr (they always go to DATA_DIR/podvisor.log)")
	return fs
}

// ParseArgs parses `podvisor agent`'s command line and config file into
// AgentOptions; known says which config file keys are some subcommand's.
func ParseArgs(args []string, known func(string) bool) (AgentOptions, error) {
	var o AgentOptions
	var hashes string
	fs := Flags(&o, &hashes)
	if err := flagfile.ParseStd(fs, args, known); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("agent takes no arguments, got %q", fs.Args())
	}
	for _, h := range strings.Split(hashes, ",") {
		if h = strings.TrimSpace(h); h != "" {
			o.CAHashes = append(o.CAHashes, h)
		}
	}
	return o, nil
}

// ClusterDNSFlags are the cluster DNS flags of up and agent.
func ClusterDNSFlags(fs *flag.FlagSet, o *ClusterDNSOptions) {
	fs.BoolVar(&o.Disable, "disable-cluster-dns", false, "do not serve cluster DNS (for clusters that bring their own; pods then get no clusterDNS unless the config file sets one)")
	fs.IntVar(&o.Port, "cluster-dns-port", DefaultClusterDNSPort, "port of the node's cluster DNS on the node's address (pods reach it as kube-dns, 10.43.0.10:53, through the service proxy)")
}

// LocalStorageFlags are the built-in local-path provisioner's flags (k3s's
// --disable local-storage and --default-local-storage-path). A server has
// no node and so no path of its own.
func LocalStorageFlags(fs *flag.FlagSet, o *LocalStorageOptions, node bool) {
	if node {
		fs.BoolVar(&o.Disable, "disable-local-storage", false, "do not run the built-in local-path provisioner on this node (rancher.io/local-path; on up, no local-path StorageClass either)")
		fs.StringVar(&o.Path, "default-local-storage-path", "", "directory of the volumes the local-path provisioner makes on this node (default DATA_DIR/storage)")
		return
	}
	fs.BoolVar(&o.Disable, "disable-local-storage", false, "do not make the local-path StorageClass (the built-in provisioner of the nodes, rancher.io/local-path)")
}
