// Package serviceproxy runs the upstream kube-proxy (k8s.io/kubernetes
// cmd/kube-proxy/app) inside the podvisor process, as k3s runs it: it
// programs the node's kernel (nftables or iptables) so that Service IPs and
// NodePorts reach the Services' endpoints.
package serviceproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
)

// Config says which node the proxy serves and with which credentials.
type Config struct {
	// Kubeconfig holds the proxy's credentials: system:kube-proxy, or a
	// node's (system:nodes, bound to system:node-proxier).
	Kubeconfig string
	NodeName   string
	// NodeIP is the node's primary address (NodePorts answer on it); nil:
	// kube-proxy takes it from the Node.
	NodeIP net.IP
	// ClusterCIDR is the pod network: traffic from it is the cluster's own
	// and is not masqueraded on its way to a Service.
	ClusterCIDR netip.Prefix
	// Routing learns the backend once chosen, to read its rules; nil: none.
	Routing *Routing
	Log     *slog.Logger
}

// Run prepares the kernel, picks the backend and runs kube-proxy until ctx
// ends. It never stops podvisor: a proxy that cannot start or cannot
// program the kernel logs why, and the node keeps serving pods.
func Run(ctx context.Context, cfg Config) {
	log := cfg.Log.With("component", "service-proxy")
	mode, why, err := ChooseMode(probeHost(ctx))
	if err != nil {
		reportFailure(ctx, cfg, log, "service proxy not started: Service IPs do not route on this node", err)
		return
	}
	log.Info("service proxy mode", "mode", mode, "reason", why)
	cfg.Routing.setMode(mode)
	for _, w := range prepareKernel(kernelSettings) {
		log.Warn("service proxy: kernel setting not applied; Services may not route", "err", w)
	}
	opts, err := options(args(cfg, mode, ownOOMScoreAdj()))
	if err != nil {
		reportFailure(ctx, cfg, log, "service proxy not started: Service IPs do not route on this node", err)
		return
	}
	log.Info("service proxy starting", "node", cfg.NodeName, "clusterCIDR", cfg.ClusterCIDR)
	// kube-proxy's informers run on wait.NeverStop and its server never
	// returns once running: it ends with the process, as podvisor's does.
	if err := opts.Run(ctx); err != nil && ctx.Err() == nil {
		reportFailure(ctx, cfg, log, "service proxy stopped: Service IPs no longer follow the API on this node", err)
	}
}

// args are kube-proxy's command line for this node.
func args(cfg Config, mode Mode, oomScoreAdj int) []string {
	a := []string{
		"--kubeconfig=" + cfg.Kubeconfig,
		"--hostname-override=" + cfg.NodeName,
		"--proxy-mode=" + string(mode),
		"--cluster-cidr=" + cfg.ClusterCIDR.String(),
		"--detect-local-mode=ClusterCIDR",
		// kube-proxy would lower the whole podvisor process's OOM score to
		// its own -999; podvisor's is the agent's to choose.
		"--oom-score-adj=" + strconv.Itoa(oomScoreAdj),
		"--profiling=false",
	}
	if cfg.NodeIP != nil {
		a = append(a, "--bind-address="+cfg.NodeIP.String())
	}
	return a
}

// options parses the arguments as kube-proxy's own binary does, through its
// options (its cobra command would set up logging a second time).
func options(args []string) (*proxyapp.Options, error) {
	o := proxyapp.NewOptions()
	fs := pflag.NewFlagSet("kube-proxy", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("kube-proxy flags: %w", err)
	}
	if err := o.Complete(fs); err != nil {
		return nil, fmt.Errorf("kube-proxy configuration: %w", err)
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("kube-proxy configuration: %w", err)
	}
	return o, nil
}

// probeHost reads what ChooseMode decides on.
func probeHost(ctx context.Context) Host {
	var h Host
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.KernelRelease = strings.TrimSpace(string(b))
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(cctx, "nft", "--version").Output(); err == nil {
		h.NFTVersion = strings.TrimSpace(string(out))
	}
	_, err := exec.LookPath("iptables")
	h.IPTables = err == nil
	return h
}

func ownOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}

// Cleanup removes every rule a service proxy left in this network
// namespace, of both backends, as `kube-proxy --cleanup` does: the rules
// outlive podvisor (Services keep routing to pods that keep running), and
// once the pods and their network are gone they would send ClusterIP
// traffic to addresses no longer on this machine.
func Cleanup(ctx context.Context) error {
	o, err := options([]string{"--cleanup"})
	if err != nil {
		return err
	}
	return o.Run(ctx)
}
