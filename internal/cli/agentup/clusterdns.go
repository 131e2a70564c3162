package agentup

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/agent/config"
	"github.com/podvisor/podvisor/internal/cluster/clusterdns"
	"github.com/podvisor/podvisor/internal/cluster/ranges"
)

// DefaultClusterDNSPort is where a node's DNS listens on the node's
// address: not 53, which a resolver of the host's may hold; pods reach it
// as kube-dns:53 through the service proxy.
const DefaultClusterDNSPort = 10053

// ClusterDNSOptions are the flags of the node's DNS.
type ClusterDNSOptions struct {
	Disable bool // --disable-cluster-dns
	Port    int  // --cluster-dns-port
}

// WithClusterDNS gives pods the cluster DNS: the kubelet configuration's
// clusterDNS, when it names none, becomes the kube-dns Service's address.
// A configuration that names servers keeps them (the user runs their own),
// and so does a node that serves no DNS.
func WithClusterDNS(kc config.Config, o ClusterDNSOptions) (config.Config, error) {
	if o.Disable || len(kc.ClusterDNS) > 0 {
		return kc, nil
	}
	if o.Port <= 0 || o.Port > 65535 {
		return kc, fmt.Errorf("--cluster-dns-port %d is not a valid port", o.Port)
	}
	ip, err := clusterdns.ServiceIP(ranges.ServiceCIDR)
	if err != nil {
		return kc, err
	}
	kc.ClusterDNS = []string{ip.String()}
	return kc, nil
}

// StartClusterDNS serves the node's DNS unless --disable-cluster-dns. The
// server (manageService) also keeps the kube-dns Service and lets every
// node publish its endpoint. Failures are log lines; the node runs on.
func StartClusterDNS(ctx context.Context, o ClusterDNSOptions, log *slog.Logger, kubeconfig, nodeName string,
	hostIP net.IP, kc config.Config, dataDir string, manageService bool) {
	if o.Disable {
		log.Info("cluster DNS disabled (--disable-cluster-dns): pods resolve Service names only if something else serves kube-dns")
		return
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		log.Error("cluster DNS not started", "err", err)
		return
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		log.Error("cluster DNS not started", "err", err)
		return
	}
	var addr netip.Addr
	if hostIP != nil {
		addr, _ = netip.AddrFromSlice(hostIP.To4())
	}
	go clusterdns.Run(ctx, clusterdns.Config{
		Client: client, Kubeconfig: kubeconfig, NodeName: nodeName, Addr: addr, Port: o.Port,
		ClusterDomain: kc.ClusterDomain, ServiceCIDR: ranges.ServiceCIDR, ResolvConf: kc.ResolvConf,
		FragmentDir: filepath.Join(dataDir, "coredns"), ManageService: manageService, Log: log,
	})
}

// PublishClusterDNS is the server's part when it runs no node: the kube-dns
// Service and the nodes' RBAC, retried until the API takes them.
func PublishClusterDNS(ctx context.Context, o ClusterDNSOptions, log *slog.Logger, kubeconfig string) {
	if o.Disable {
		log.Info("cluster DNS disabled (--disable-cluster-dns): no kube-dns Service")
		return
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		log.Error("kube-dns Service not made", "err", err)
		return
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		log.Error("kube-dns Service not made", "err", err)
		return
	}
	go func() {
		for {
			err := clusterdns.EnsureClusterObjects(ctx, client, ranges.ServiceCIDR, o.Port)
			if err == nil {
				return
			}
			log.Error("kube-dns Service not made yet", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Second):
			}
		}
	}()
}
