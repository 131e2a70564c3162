package containerd

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// cniPlugins are the CNI plugins the pod network needs: the conflist's
// three, and loopback, which containerd runs for every pod's lo.
var cniPlugins = []string{"bridge", "host-local", "portmap", "loopback"}

const cniConfFile = "10-podvisor.conflist"

// writeCNIConfig writes the pod network: one Linux bridge with the node's pod
// CIDR, host-local addresses (kept in the state directory, so a reboot frees
// them as it frees their pods), masquerading of traffic leaving the node, and
// hostPort mappings.
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
				"ipMasq":      true,
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
