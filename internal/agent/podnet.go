package agent

import (
	"context"
	"path/filepath"

	"github.com/podvisor/podvisor/internal/cluster/podnet"
)

// routePodNetwork routes this node's pods to the other nodes' (flannel
// host-gw) once the node has its pod CIDR. The node is ready without it:
// its own pods work, and a machine alone needs no routes.
func (a *Agent) routePodNetwork(ctx context.Context) error {
	if !a.cfg.ClusterCIDR.IsValid() || a.cfg.HostIP == nil {
		a.cfg.Log.Info("no routes to other nodes' pods: no cluster CIDR or node IP", "clusterCIDR", a.cfg.ClusterCIDR, "nodeIP", a.cfg.HostIP)
		return nil
	}
	return podnet.Run(ctx, podnet.Config{
		Kubeconfig:  a.cfg.Kubeconfig,
		NodeName:    a.cfg.NodeName,
		NodeIP:      a.cfg.HostIP,
		ClusterCIDR: a.cfg.ClusterCIDR,
		Dir:         filepath.Join(a.cfg.DataDir, "agent", "flannel"),
		Log:         a.cfg.Log,
	})
}
