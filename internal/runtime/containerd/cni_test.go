package containerd

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Pods reach other nodes' pods without NAT: the masquerade rule exempts the
// whole cluster CIDR; a rule of an earlier podvisor (exempting the node's
// own pod CIDR only) is replaced; RemovePodNetwork removes whichever exist.
func TestMasqueradeExemptsTheClusterCIDR(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: iptables")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip(err)
	}
	bridge := fmt.Sprintf("pvtm%d", os.Getpid()%100000)
	paths := Paths{}
	t.Cleanup(func() { RemovePodNetwork(paths, bridge) })
	pod, cluster := netip.MustParsePrefix("10.214.3.0/24"), netip.MustParsePrefix("10.214.0.0/16")
	rules := func() []string {
		out, err := exec.Command("iptables", "-w", "-t", "nat", "-S", "POSTROUTING").Output()
		if err != nil {
			t.Fatal(err)
		}
		var ours []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "podvisor pod network "+bridge+`"`) {
				ours = append(ours, strings.Join(strings.Fields(l)[3:7], " "))
			}
		}
		return ours
	}

	if err := ensureMasquerade(bridge, pod, netip.Prefix{}); err != nil {
		t.Fatal(err)
	}
	if got, want := rules(), []string{"10.214.3.0/24 ! -d 10.214.3.0/24"}; !slices.Equal(got, want) {
		t.Fatalf("without a cluster CIDR: rules %q, want %q", got, want)
	}
	for range 2 {
		if err := ensureMasquerade(bridge, pod, cluster); err != nil {
			t.Fatal(err)
		}
		if got, want := rules(), []string{"10.214.3.0/24 ! -d 10.214.0.0/16"}; !slices.Equal(got, want) {
			t.Fatalf("with cluster CIDR %s: rules %q, want %q", cluster, got, want)
		}
	}
	if err := masqueradeRule(bridge, pod, pod).run("-A"); err != nil {
		t.Fatal(err)
	}
	RemovePodNetwork(paths, bridge)
	if got := rules(); len(got) != 0 {
		t.Errorf("after RemovePodNetwork: rules %q", got)
	}
}
