package containerd

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
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
func setUpPodNetwork(p Paths, bridge string, podCIDR netip.Prefix) error {
	if err := writeCNIConfig(p, bridge, podCIDR); err != nil {
		return fmt.Errorf("CNI config: %w", err)
	}
	return ensureMasquerade(bridge, podCIDR)
}

// ensureMasquerade makes sure one NAT rule masquerades what pods of podCIDR
// send outside it (the bridge plugin's ipMasq, once per node rather than once
// per pod). The rule names the bridge in a comment, so that it can be told
// apart and removed (RemoveMasquerade).
func ensureMasquerade(bridge string, podCIDR netip.Prefix) error {
	bin, args := masqueradeRule(bridge, podCIDR)
	if exec.Command(bin, append([]string{"-w", "-t", "nat", "-C"}, args...)...).Run() == nil {
		return nil
	}
	if out, err := exec.Command(bin, append([]string{"-w", "-t", "nat", "-A"}, args...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: masquerade rule for %s: %v: %s", bin, podCIDR, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// RemovePodNetwork removes what the pod network of paths' containerd left
// on the host besides its files: the masquerade rule and the bridge. For a
// node that is gone for good (tests); its pods must be removed first.
func RemovePodNetwork(paths Paths, bridge string) {
	if bridge == "" {
		bridge = paths.DefaultBridge()
	}
	var conf struct {
		Plugins []struct {
			IPAM struct {
				Ranges [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if b, err := os.ReadFile(filepath.Join(paths.CNIConfDir, cniConfFile)); err == nil && json.Unmarshal(b, &conf) == nil {
		for _, pl := range conf.Plugins {
			for _, r := range pl.IPAM.Ranges {
				for _, sub := range r {
					if cidr, err := netip.ParsePrefix(sub.Subnet); err == nil {
						bin, args := masqueradeRule(bridge, cidr)
						for exec.Command(bin, append([]string{"-w", "-t", "nat", "-D"}, args...)...).Run() == nil {
						}
					}
				}
			}
		}
	}
	_ = exec.Command("ip", "link", "del", bridge).Run()
}

func masqueradeRule(bridge string, podCIDR netip.Prefix) (string, []string) {
	bin := "iptables"
	if podCIDR.Addr().Is6() {
		bin = "ip6tables"
	}
	cidr := podCIDR.Masked().String()
	return bin, []string{"POSTROUTING", "-s", cidr, "!", "-d", cidr,
		"-m", "comment", "--comment", "podvisor pod network " + bridge, "-j", "MASQUERADE"}
}
