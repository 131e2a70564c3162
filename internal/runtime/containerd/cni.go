package containerd

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// cniPlugins are the CNI plugins the pod network needs: the conflist's
// three, and loopback, which containerd runs for every pod's lo.
var cniPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

const cniConfFile = "10-podvisor.conflist"

// writeCNIConfig writes the pod network: one Linux bridge with the node's pod
// CIDR, host-local addresses (kept in the state directory, so a reboot frees
// them as it frees their pods) and hostPort mappings. Traffic leaving the
// pod network is masqueraded by one rule for the whole CIDR (ensureMasquerade),
// not by the bridge plugin's ipMasq: that adds a chain per pod, four
// iptables runs under the xtables lock for each sandbox created or removed,
// which made a burst of 100 pods wait on iptables.
func writeCNIConfig(p Paths, bridge string, podCIDR netip.Prefix) error {
	type ipRange struct {
		Subnet string `json:"subnet"`
	}
	type route struct {
		Dst string `json:"dst"`
	}
	defaultRoute := "0.0.0.0/0"
	if podCIDR.Addr().Is6() {
		defaultRoute = "::/0"
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "podvisor",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]ipRange{{{Subnet: podCIDR.Masked().String()}}},
					"routes":  []route{{Dst: defaultRoute}},
					"dataDir": filepath.Join(p.State, "cni-ipam"),
				},
			},
			map[string]any{
				"type":         "portmap",
				"capabilities": map[string]bool{"portMappings": true},
			},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.CNIConfDir, 0o755); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(p.CNIConfDir, cniConfFile), append(b, '\n'))
}

// findCNIPlugins returns the first of dirs that holds every plugin the pod
// network needs, or an error naming what is missing and where it comes from.
func findCNIPlugins(dirs []string) (string, error) {
	for _, d := range dirs {
		ok := true
		for _, name := range cniPlugins {
			if _, err := os.Stat(filepath.Join(d, name)); err != nil {
				ok = false
				break
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", fmt.Errorf("CNI plugins %v not found in %v (Debian: apt-get install containernetworking-plugins)", cniPlugins, dirs)
}

// setUpPodNetwork writes the CNI config for podCIDR and its masquerade rule.
func setUpPodNetwork(p Paths, bridge string, podCIDR, clusterCIDR netip.Prefix) error {
	if err := writeCNIConfig(p, bridge, podCIDR); err != nil {
		return fmt.Errorf("CNI config: %w", err)
	}
	return ensureMasquerade(bridge, podCIDR, clusterCIDR)
}

// ensureMasquerade makes sure one NAT rule masquerades what pods of podCIDR
// send outside the cluster's pod network, clusterCIDR (podCIDR when
// invalid): pods reach the pods of other nodes without NAT, as the
// Kubernetes network model has it. It is the bridge plugin's ipMasq, once
// per node rather than once per pod. The rule names the bridge in a
// comment, so that it can be told apart, replaced when the CIDRs change and
// removed (RemovePodNetwork).
func ensureMasquerade(bridge string, podCIDR, clusterCIDR netip.Prefix) error {
	if !clusterCIDR.IsValid() {
		clusterCIDR = podCIDR
	}
	want := masqueradeRule(bridge, podCIDR, clusterCIDR)
	found := false
	for _, r := range bridgeMasquerades(want.bin, bridge) {
		if slices.Equal(r.args, want.args) && !found {
			found = true
			continue
		}
		if err := r.run("-D"); err != nil {
			return err
		}
	}
	if found {
		return nil
	}
	return want.run("-A")
}

// RemovePodNetwork removes what the pod network of paths' containerd left
// on the host besides its files: the masquerade rule and the bridge. For a
// node that is gone for good (tests); its pods must be removed first.
func RemovePodNetwork(paths Paths, bridge string) {
	if bridge == "" {
		bridge = paths.DefaultBridge()
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, r := range bridgeMasquerades(bin, bridge) {
			_ = r.run("-D")
		}
	}
	_ = exec.Command("ip", "link", "del", bridge).Run()
}

// natRule is one rule of the nat table's POSTROUTING chain.
type natRule struct {
	bin  string // iptables or ip6tables
	args []string
}

func (r natRule) run(op string) error {
	if out, err := exec.Command(r.bin, append([]string{"-w", "-t", "nat", op}, r.args...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s %s: %v: %s", r.bin, op, strings.Join(r.args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func masqueradeRule(bridge string, podCIDR, dst netip.Prefix) natRule {
	bin := "iptables"
	if podCIDR.Addr().Is6() {
		bin = "ip6tables"
	}
	return natRule{bin: bin, args: []string{"POSTROUTING", "-s", podCIDR.Masked().String(), "!", "-d", dst.Masked().String(),
		"-m", "comment", "--comment", masqueradeComment(bridge), "-j", "MASQUERADE"}}
}

func masqueradeComment(bridge string) string { return "podvisor pod network " + bridge }

// bridgeMasquerades lists the masquerade rules of bridge's pod network,
// whichever CIDRs they name (those of an earlier podvisor included).
func bridgeMasquerades(bin, bridge string) []natRule {
	out, err := exec.Command(bin, "-w", "-t", "nat", "-S", "POSTROUTING").Output()
	if err != nil {
		return nil
	}
	comment := fmt.Sprintf("--comment %q", masqueradeComment(bridge))
	var rules []natRule
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, comment+" ") {
			continue
		}
		var src, dst netip.Prefix
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			switch {
			case f[i] == "-s":
				src, _ = netip.ParsePrefix(f[i+1])
			case f[i] == "-d" && i > 0 && f[i-1] == "!":
				dst, _ = netip.ParsePrefix(f[i+1])
			}
		}
		if src.IsValid() && dst.IsValid() {
			r := masqueradeRule(bridge, src, dst)
			r.bin = bin
			rules = append(rules, r)
		}
	}
	return rules
}
