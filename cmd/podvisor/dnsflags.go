package main

import (
	"flag"

	"github.com/podvisor/podvisor/internal/cli/up"
)

// clusterDNSFlags are the cluster DNS flags of up and agent.
func clusterDNSFlags(fs *flag.FlagSet, o *up.ClusterDNSOptions) {
	fs.BoolVar(&o.Disable, "disable-cluster-dns", false, "do not serve cluster DNS (for clusters that bring their own; pods then get no clusterDNS unless the config file sets one)")
	fs.IntVar(&o.Port, "cluster-dns-port", up.DefaultClusterDNSPort, "port of the node's cluster DNS on the node's address (pods reach it as kube-dns, 10.43.0.10:53, through the service proxy)")
}
