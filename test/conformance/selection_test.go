package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

func TestLanes(t *testing.T) {
	for _, tc := range []struct {
		suite string
		procs int
		want  []lane
	}{
		{"node", 4, []lane{{"parallel", nodeLabels, 4}}},
		{"node", 0, []lane{{"parallel", nodeLabels, 1}}},
		{"conformance", 2, []lane{
			{"parallel", "(" + conformanceLabels + ") && !Serial", 2},
			{"serial", "(" + conformanceLabels + ") && Serial", 1},
		}},
	} {
		if got := lanes(suites[tc.suite], tc.procs); !slices.Equal(got, tc.want) {
			t.Errorf("lanes(%s, %d) = %v, want %v", tc.suite, tc.procs, got, tc.want)
		}
	}
}

// The label filters select what a certification run does; the labels are
// those the e2e framework gives a spec for the [Tags] of its text.
func TestSuiteLabels(t *testing.T) {
	for _, tc := range []struct {
		labels            []string
		node, conformance bool
	}{
		{[]string{"sig-node", "NodeConformance"}, true, true},
		{[]string{"sig-node", "Conformance"}, true, true},
		{[]string{"sig-network", "Conformance"}, false, true},
		{[]string{"sig-apps", "Serial", "Conformance"}, false, true},
		{[]string{"sig-apps", "Slow", "Conformance"}, false, true},
		{[]string{"sig-scheduling", "Serial", "Disruptive", "Conformance"}, false, false},
		{[]string{"sig-node", "NodeConformance", "Slow"}, false, false},
		{[]string{"sig-node", "NodeConformance", "Feature:GPUDevicePlugin"}, false, false},
		{[]string{"sig-storage", "NodeConformance"}, false, false},
		{[]string{"sig-network"}, false, false},
	} {
		for _, s := range []struct {
			labels string
			want   bool
		}{{nodeLabels, tc.node}, {conformanceLabels, tc.conformance}} {
			f, err := types.ParseLabelFilter(s.labels)
			if err != nil {
				t.Fatal(err)
			}
			if got := f(tc.labels); got != s.want {
				t.Errorf("%q on %v = %v, want %v", s.labels, tc.labels, got, s.want)
			}
		}
	}
}

func TestNetGuardRules(t *testing.T) {
	g := netGuard{serviceCIDR: netip.MustParsePrefix("10.43.0.0/16"), clusterCIDR: netip.MustParsePrefix("10.245.0.0/16")}
	rules := g.nftRules()
	for _, want := range []string{
		"table ip podvisor-conformance {",
		"type filter hook output priority filter;",
		"type filter hook forward priority filter;",
		"ip daddr 10.43.0.0/16 reject with icmp type host-unreachable",
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q:\n%s", want, rules)
		}
	}
	if n := strings.Count(rules, "reject"); n != 2 {
		t.Errorf("%d rejects, want 2 (output, forward):\n%s", n, rules)
	}
	if strings.Contains(rules, "iifname") {
		t.Errorf("a single node's rules name a lab bridge:\n%s", rules)
	}
	g.labBridge = "pvlab0a0b"
	rules = g.nftRules()
	if want := `iifname "pvlab0a0b" oifname != "pvlab0a0b" reject`; !strings.Contains(rules, want) {
		t.Errorf("-nodes rules lack %q:\n%s", want, rules)
	}
	if m := g.machineRules(); strings.Contains(m, "iifname") || !strings.Contains(m, "ip daddr 10.43.0.0/16 reject") {
		t.Errorf("a machine's rules: want the service network's reject only:\n%s", m)
	}
}

func TestLddPaths(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n" +
		"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n" +
		"\tlibgone.so.1 => not found\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n"
	want := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if got := lddPaths(out); !slices.Equal(got, want) {
		t.Errorf("lddPaths = %q, want %q", got, want)
	}
}

func TestNodeCountExclusions(t *testing.T) {
	for _, tc := range []struct {
		suite string
		nodes int
		want  int
	}{
		{"conformance", 1, len(singleNodeExclusions)},
		{"conformance", 2, 0},
		{"conformance", 3, 0},
		{"node", 1, 0},
		{"node", 3, 0},
	} {
		got := nodeCountExclusions(suites[tc.suite], tc.nodes)
		if len(got) != tc.want {
			t.Errorf("-suite %s -nodes %d: %d exclusions, want %d", tc.suite, tc.nodes, len(got), tc.want)
		}
		for _, e := range got {
			if !strings.HasPrefix(e.reason, "one node") {
				t.Errorf("-suite %s -nodes %d excludes %s: %s, which is not a one-node reason", tc.suite, tc.nodes, e.re, e.reason)
			}
		}
	}
	if len(singleNodeExclusions) == 0 {
		t.Fatal("no single-node exclusions: the table above tests nothing")
	}
}
