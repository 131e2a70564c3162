package agentup

import (
	"context"
	"log/slog"
	"net"
	"net/netip"

	"github.com/podvisor/podvisor/internal/cluster/serviceproxy"
)

// StartServiceProxy runs the node's kube-proxy beside the agent unless
// --disable-service-proxy says the cluster brings its own. It starts once
// the Node exists (kube-proxy reads it) and never stops the node: its
// failures are log lines.
//
// routing learns the backend it programs, for the agent's pods that are
// stopped only once it no longer routes to them.
func StartServiceProxy(ctx context.Context, disabled bool, log *slog.Logger, kubeconfig, nodeName string, nodeIP net.IP, clusterCIDR netip.Prefix, routing *serviceproxy.Routing) {
	if disabled {
		log.Info("service proxy disabled (--disable-service-proxy): Service IPs route only if something else programs them")
		return
	}
	go serviceproxy.Run(ctx, serviceproxy.Config{
		Kubeconfig: kubeconfig, NodeName: nodeName, NodeIP: nodeIP, ClusterCIDR: clusterCIDR, Routing: routing, Log: log,
	})
}
