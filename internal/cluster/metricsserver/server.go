// Package metricsserver runs the upstream metrics-server
// (sigs.k8s.io/metrics-server) inside podvisor's control plane, as k3s
// deploys it as a pod: it scrapes each node's agent API /metrics/resource
// and serves the resource metrics API (metrics.k8s.io/v1beta1) through the
// API server's aggregation layer, for `kubectl top` and autoscalers.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/metrics-server/cmd/metrics-server/app/options"
)

// DefaultPort is where metrics-server listens on the control plane's
// address (upstream's pod listens on 10250, the agent's port here).
const DefaultPort = 10260

// DefaultResolution is how often it scrapes the nodes: k3s's setting.
// metrics-server refuses less than 10 s.
const DefaultResolution = 15 * time.Second

// Config says how the embedded metrics-server runs.
type Config struct {
	// Kubeconfig holds its credentials (User): for the API server and,
	// as upstream's, for the nodes' agent APIs.
	Kubeconfig string
	// CAFile verifies the nodes' agent API serving certificates (the
	// cluster CA signs them).
	CAFile string
	// CertFile and KeyFile are its serving certificate, which the
	// aggregator checks against the APIService's caBundle.
	CertFile, KeyFile string
	// Addr and Port are where it listens: the address its EndpointSlice
	// names, which the API server dials.
	Addr net.IP
	Port int
	// Resolution is its scrape interval; 0: DefaultResolution.
	Resolution time.Duration
	Log        *slog.Logger
}

// Args are metrics-server's flags for cfg, as its own binary takes them.
func Args(cfg Config) []string {
	res := cfg.Resolution
	if res == 0 {
		res = DefaultResolution
	}
	return []string{
		"--kubeconfig=" + cfg.Kubeconfig,
		"--authentication-kubeconfig=" + cfg.Kubeconfig,
		"--authorization-kubeconfig=" + cfg.Kubeconfig,
		"--bind-address=" + cfg.Addr.String(),
		"--secure-port=" + strconv.Itoa(cfg.Port),
		"--tls-cert-file=" + cfg.CertFile,
		"--tls-private-key-file=" + cfg.KeyFile,
		// The port each node's agent publishes (joined nodes may use
		// another than 10250), at its InternalIP, verified by the CA.
		"--kubelet-use-node-status-port",
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--kubelet-certificate-authority=" + cfg.CAFile,
		"--metric-resolution=" + res.String(),
		"--profiling=false",
	}
}

// Run runs metrics-server until ctx ends. Its cluster objects
// (EnsureClusterObjects) must exist first: it reads the requestheader CA
// with the RBAC they grant.
func Run(ctx context.Context, cfg Config) error {
	o := options.NewOptions()
	fs := pflag.NewFlagSet("metrics-server", pflag.ContinueOnError)
	for _, s := range o.Flags().FlagSets {
		fs.AddFlagSet(s)
	}
	if err := fs.Parse(Args(cfg)); err != nil {
		return fmt.Errorf("metrics-server flags: %w", err)
	}
	// o.Validate would also apply metrics-server's logging options to the
	// process's klog, which the control plane already configured.
	errs := o.KubeletClient.Validate()
	errs = append(errs, o.GenericServerRunOptions.Validate()...)
	if o.MetricResolution < 10*time.Second {
		errs = append(errs, fmt.Errorf("metric resolution %v is under metrics-server's minimum of 10s", o.MetricResolution))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	sc, err := o.ServerConfig()
	if err != nil {
		return err
	}
	s, err := sc.Complete()
	if err != nil {
		return err
	}
	cfg.Log.Info("metrics-server serving metrics.k8s.io", "addr", net.JoinHostPort(cfg.Addr.String(), strconv.Itoa(cfg.Port)), "resolution", o.MetricResolution)
	return s.RunUntil(ctx.Done())
}
