package agentup

import (
	"cmp"
	"fmt"
	"net/netip"

	"github.com/podvisor/podvisor/internal/cluster/ranges"
)

// ClusterCIDR parses --cluster-cidr (empty: the control plane's default):
// the agent routes to other nodes' pods in it and does not masquerade
// traffic to them.
func ClusterCIDR(flag string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(cmp.Or(flag, ranges.DefaultClusterCIDR))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--cluster-cidr: %w", err)
	}
	return p.Masked(), nil
}
