package main

import (
	"flag"

	"github.com/podvisor/podvisor/internal/cli/up"
	"github.com/podvisor/podvisor/internal/cluster/metricsserver"
)

// metricsServerFlags are the embedded metrics-server's flags of up and
// server (k3s's --disable metrics-server).
func metricsServerFlags(fs *flag.FlagSet, o *up.MetricsServerOptions) {
	fs.BoolVar(&o.Disable, "disable-metrics-server", false, "do not run the embedded metrics-server (no metrics.k8s.io API: kubectl top has no figures; for clusters that bring their own)")
	fs.IntVar(&o.Port, "metrics-server-port", metricsserver.DefaultPort, "port of the embedded metrics-server on this machine's address (the API server's aggregation layer reaches it there)")
}
