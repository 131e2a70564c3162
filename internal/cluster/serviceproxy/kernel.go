package serviceproxy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// setting is a sysctl a service proxy needs, and the module that provides it.
type setting struct {
	path   string // under /proc/sys
	value  string
	module string // loaded when path is missing
}

// kernelSettings: a Service's reply from a pod on the same bridge as its
// client is bridged, not routed; only br_netfilter with
// bridge-nf-call-iptables shows it to conntrack, which undoes the proxy's
// DNAT on it. Forwarding carries traffic DNATed to other nodes' pods.
var kernelSettings = []setting{
	{path: "net/bridge/bridge-nf-call-iptables", value: "1", module: "br_netfilter"},
	{path: "net/bridge/bridge-nf-call-ip6tables", value: "1", module: "br_netfilter"},
	{path: "net/ipv4/ip_forward", value: "1"},
}

// prepareKernel applies the settings; it returns what it could not do.
func prepareKernel(settings []setting) []error {
	var errs []error
	for _, s := range settings {
		p := filepath.Join("/proc/sys", s.path)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) && s.module != "" {
			if out, err := exec.Command("modprobe", s.module).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("modprobe %s: %v: %s", s.module, err, strings.TrimSpace(string(out))))
				continue
			}
		}
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == s.value {
			continue
		}
		if err := os.WriteFile(p, []byte(s.value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("sysctl %s=%s: %w", strings.ReplaceAll(s.path, "/", "."), s.value, err))
		}
	}
	return errs
}
