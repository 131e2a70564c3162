package podsecurity

import (
	"fmt"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/node/util/sysctl"
)

// Sysctl admission (reason of a refused pod, upstream's).
const ReasonSysctlForbidden = "SysctlForbidden"

// SafeSysctls are the sysctls every node allows (Kubernetes 1.36; the
// kernel here has all of them namespaced).
var SafeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.ping_group_range",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.ipv4.tcp_rmem",
	"net.ipv4.tcp_wmem",
}

// Allowlist is the sysctls a node admits: the safe ones and
// KubeletConfiguration allowedUnsafeSysctls (names, or prefixes ending in
// "*"), each of a namespace the kernel has per pod.
type Allowlist struct {
	exact    map[string]sysctl.Namespace
	prefixes map[string]sysctl.Namespace
}

var sysctlPattern = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\*)?$`)

// NewAllowlist builds the allowlist; a pattern that is malformed or not of
// a namespaced sysctl is an error (the node's configuration is wrong).
func NewAllowlist(unsafe []string) (*Allowlist, error) {
	a := &Allowlist{exact: map[string]sysctl.Namespace{}, prefixes: map[string]sysctl.Namespace{}}
	for _, p := range append(append([]string{}, SafeSysctls...), unsafe...) {
		p = sysctl.NormalizeName(p)
		if len(p) > 253 || !sysctlPattern.MatchString(p) {
			return nil, fmt.Errorf("sysctl %q must have at most 253 characters and match regex %s", p, sysctlPattern)
		}
		ns, name, prefixed := sysctl.GetNamespace(p)
		if ns == sysctl.UnknownNamespace {
			return nil, fmt.Errorf("the sysctls %q are not known to be namespaced", name)
		}
		if prefixed {
			a.prefixes[name] = ns
		} else {
			a.exact[name] = ns
		}
	}
	return a, nil
}

// Admit checks the pod's sysctls: the message of a refusal is upstream's
// ("forbidden sysctl: ..."), ok when all are allowed.
func (a *Allowlist) Admit(pod *v1.Pod) (message string, ok bool) {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		return "", true
	}
	for _, s := range psc.Sysctls {
		if err := a.check(s.Name, pod.Spec.HostNetwork, pod.Spec.HostIPC); err != nil {
			return "forbidden sysctl: " + err.Error(), false
		}
	}
	return "", true
}

func (a *Allowlist) check(name string, hostNet, hostIPC bool) error {
	name = sysctl.NormalizeName(name)
	ns, found := a.exact[name]
	if !found {
		for p, pns := range a.prefixes {
			if strings.HasPrefix(name, p) {
				ns, found = pns, true
				break
			}
		}
	}
	if !found {
		return fmt.Errorf("%q not allowlisted", name)
	}
	if (ns == sysctl.IPCNamespace && hostIPC) || (ns == sysctl.NetNamespace && hostNet) {
		return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
	}
	return nil
}
