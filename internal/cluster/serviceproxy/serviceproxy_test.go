package serviceproxy

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
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

// A proxy that does not route says so on its Node, where `kubectl get
// events` and `kubectl describe node` show it.
func TestFailureEvent(t *testing.T) {
	now := time.Date(2026, 11, 29, 1, 2, 3, 4, time.UTC)
	ev := failureEvent("n1", "service proxy not started: no iptables", now)
	if ev.Namespace != "default" || ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "n1" ||
		ev.Type != "Warning" || ev.Reason != FailedReason || ev.Message != "service proxy not started: no iptables" ||
		!ev.LastTimestamp.Time.Equal(now) || ev.Count != 1 || !strings.HasPrefix(ev.Name, "n1.") {
		t.Errorf("failureEvent = %+v", ev)
	}
}
