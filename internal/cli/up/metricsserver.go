package up

import (
	"context"
	"log/slog"
	"net"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/podvisor/podvisor/internal/cli/agentup"
	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cluster/metricsserver"
	"github.com/podvisor/podvisor/internal/controlplane"
)

// MetricsServerOptions are the flags of the embedded metrics-server (k3s's
// --disable metrics-server).
type MetricsServerOptions struct {
	Disable bool // --disable-metrics-server
	Port    int  // --metrics-server-port
}

// checkMetricsServerPort fails the start early, as for the other ports.
func checkMetricsServerPort(o MetricsServerOptions, addr net.IP) error {
	if o.Disable || addr == nil {
		return nil
	}
	return agentup.CheckPort(addr.String(), o.Port, "--metrics-server-port")
}

// startMetricsServer runs the control plane's metrics-server at addr
// unless --disable-metrics-server, after making its cluster objects
// (retried until the API takes them). Failures are log lines: the cluster
// runs on without `kubectl top`.
func startMetricsServer(ctx context.Context, o MetricsServerOptions, log *slog.Logger, dataDir string, addr net.IP) {
	clients := func() (kubernetes.Interface, aggregator.Interface, error) {
		rc, err := clientcmd.BuildConfigFromFlags("", datadir.AdminKubeconfig(dataDir))
		if err != nil {
			return nil, nil, err
		}
		c, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, nil, err
		}
		agg, err := aggregator.NewForConfig(rc)
		return c, agg, err
	}
	c, agg, err := clients()
	if err != nil {
		log.Error("metrics-server not started", "err", err)
		return
	}
	if o.Disable {
		log.Info("metrics-server disabled (--disable-metrics-server): no metrics.k8s.io API, kubectl top has no figures")
		go retry(ctx, log, "metrics.k8s.io APIService not removed yet", func() error { return metricsserver.RemoveAPIService(ctx, agg) })
		return
	}
	if addr == nil {
		// EndpointSlices refuse loopback addresses, and the aggregator
		// dials the endpoint.
		log.Error("metrics-server not started: this machine has no address other than loopback for the API server to reach it; kubectl top has no figures")
		return
	}
	ca, err := os.ReadFile(controlplane.CAFile(dataDir))
	if err != nil {
		log.Error("metrics-server not started", "err", err)
		return
	}
	crt, key := controlplane.MetricsServerServing(dataDir)
	cfg := metricsserver.Config{
		Kubeconfig: controlplane.MetricsServerKubeconfig(dataDir), CAFile: controlplane.CAFile(dataDir),
		CertFile: crt, KeyFile: key, Addr: addr, Port: o.Port, Log: log,
	}
	go func() {
		if !retry(ctx, log, "metrics-server objects not made yet", func() error {
			return metricsserver.EnsureClusterObjects(ctx, c, agg, addr, o.Port, ca)
		}) {
			return
		}
		if err := metricsserver.Run(ctx, cfg); err != nil && ctx.Err() == nil {
			log.Error("metrics-server stopped: kubectl top has no figures", "err", err)
		}
	}()
}

// retry calls f every 10 s until it succeeds (true) or ctx ends (false).
func retry(ctx context.Context, log *slog.Logger, what string, f func() error) bool {
	for {
		err := f()
		if err == nil {
			return true
		}
		log.Error(what, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Second):
		}
	}
}
