package serviceproxy

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	cfg := Config{Kubeconfig: "/d/kubeconfigs/kube-proxy.kubeconfig", NodeName: "n1", ClusterCIDR: netip.MustParsePrefix("10.42.0.0/16")}
	for _, tc := range []struct {
		name   string
		nodeIP net.IP
		mode   Mode
		want   []string
		absent string
	}{
		{"with a node address", net.ParseIP("192.0.2.2"), NFTables, []string{
			"--kubeconfig=/d/kubeconfigs/kube-proxy.kubeconfig", "--hostname-override=n1", "--proxy-mode=nftables",
			"--cluster-cidr=10.42.0.0/16", "--detect-local-mode=ClusterCIDR", "--oom-score-adj=-500", "--bind-address=192.0.2.2"}, ""},
		{"without one kube-proxy reads the Node's", nil, IPTables, []string{"--proxy-mode=iptables"}, "--bind-address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.NodeIP = tc.nodeIP
			got := args(c, tc.mode, -500)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("args = %q, missing %q", got, w)
				}
			}
			for _, a := range got {
				if tc.absent != "" && strings.HasPrefix(a, tc.absent) {
					t.Errorf("args = %q, want no %s", got, tc.absent)
				}
			}
		})
	}
}

// TestOptionsAcceptArgs: kube-proxy's own options parse, complete and
// validate what podvisor gives it (a renamed flag upstream fails here, not
// on a user's node).
func TestOptionsAcceptArgs(t *testing.T) {
	for _, mode := range []Mode{NFTables, IPTables} {
		a := args(Config{Kubeconfig: "/nonexistent", NodeName: "n1", NodeIP: net.ParseIP("192.0.2.2"),
			ClusterCIDR: netip.MustParsePrefix("10.42.0.0/16")}, mode, 0)
		if _, err := options(a); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
	}
	if _, err := options([]string{"--proxy-mode=carrier-pigeon"}); err == nil {
		t.Error("an unknown proxy mode was accepted")
	}
}
