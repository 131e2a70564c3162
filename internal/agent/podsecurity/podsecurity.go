// Package podsecurity is what a pod's containers may do, as the kubelet
// computes it for a CRI runtime: a container's effective securityContext
// (the pod's settings with the container's own overriding them), the pod's
// namespaces and seccomp profile, and which sysctls a node admits. Pure
// functions with table tests; the CRI runtime translates the result.
//
// Upstream: https://kubernetes.io/docs/tasks/configure-pod-container/security-context/
// and https://kubernetes.io/docs/tasks/administer-cluster/sysctl-cluster/
package podsecurity

import (
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Node is the node's side: KubeletConfiguration seccompDefault, and where
// Localhost seccomp profiles live (the kubelet's <root-dir>/seccomp).
type Node struct {
	SeccompDefault     bool
	SeccompProfileRoot string
}

// Container is container c's effective security. Capabilities, privileged,
// readOnlyRootFilesystem, allowPrivilegeEscalation and procMount are the
// container's own; seccomp is the container's, else the pod's, else
// RuntimeDefault with seccompDefault, else unconfined.
func Container(pod *v1.Pod, c *v1.Container, node Node) (*runtime.Security, error) {
	s := &runtime.Security{}
	sc := c.SecurityContext
	if sc != nil {
		s.Privileged = sc.Privileged != nil && *sc.Privileged
		s.ReadOnlyRootfs = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		// Unset allowPrivilegeEscalation allows it.
		s.NoNewPrivs = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
		if caps := sc.Capabilities; caps != nil {
			for _, a := range caps.Add {
				s.CapAdd = append(s.CapAdd, string(a))
			}
			for _, d := range caps.Drop {
				s.CapDrop = append(s.CapDrop, string(d))
			}
		}
		s.UnmaskedProc = sc.ProcMount != nil && *sc.ProcMount == v1.UnmaskedProcMount
	}
	var profile *v1.SeccompProfile
	if sc != nil && sc.SeccompProfile != nil {
		profile = sc.SeccompProfile
	} else if psc := pod.Spec.SecurityContext; psc != nil {
		profile = psc.SeccompProfile
	}
	s.AppArmor = appArmor(pod, c)
	var err error
	s.Seccomp, err = seccomp(profile, node)
	return s, err
}

// Sandbox is the pod's own security: its namespaces, its seccomp profile
// (the pod's, or RuntimeDefault with seccompDefault), privileged when any
// of its containers is, and its sysctls.
func Sandbox(pod *v1.Pod, node Node, spec *runtime.SandboxSpec) error {
	spec.HostPID, spec.HostIPC = pod.Spec.HostPID, pod.Spec.HostIPC
	spec.SharePID = pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace
	var profile *v1.SeccompProfile
	if psc := pod.Spec.SecurityContext; psc != nil {
		profile = psc.SeccompProfile
		for _, s := range psc.Sysctls {
			if spec.Sysctls == nil {
				spec.Sysctls = map[string]string{}
			}
			spec.Sysctls[s.Name] = s.Value
		}
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				spec.Privileged = true
			}
		}
	}
	for _, e := range pod.Spec.EphemeralContainers {
		if sc := e.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			spec.Privileged = true
		}
	}
	var err error
	spec.Seccomp, err = seccomp(profile, node)
	return err
}

// seccomp is the runtime's profile for the API's (nil: the node's default).
func seccomp(p *v1.SeccompProfile, node Node) (runtime.SecurityProfile, error) {
	if p == nil {
		if node.SeccompDefault {
			return runtime.SecurityProfile{Type: string(v1.SeccompProfileTypeRuntimeDefault)}, nil
		}
		return runtime.SecurityProfile{}, nil
	}
	switch p.Type {
	case v1.SeccompProfileTypeRuntimeDefault:
		return runtime.SecurityProfile{Type: string(v1.SeccompProfileTypeRuntimeDefault)}, nil
	case v1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil || *p.LocalhostProfile == "" {
			return runtime.SecurityProfile{}, fmt.Errorf("localhostProfile must be set if seccompProfile type is Localhost.")
		}
		return runtime.SecurityProfile{Type: string(v1.SeccompProfileTypeLocalhost),
			Path: filepath.Join(node.SeccompProfileRoot, *p.LocalhostProfile)}, nil
	}
	return runtime.SecurityProfile{}, nil // Unconfined
}

// MaskedPaths and ReadonlyPaths are the /proc and /sys paths the kubelet
// hides or makes read-only in a container without procMount Unmasked.
func MaskedPaths() []string {
	return []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap"}
}

func ReadonlyPaths() []string {
	return []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
}

// Unenforceable names the first securityContext setting of container c
// (or of its pod) that a runtime without container isolation (the process
// runtime: host processes, as root) cannot honour, because it would
// restrict the container and silently would not; "" when there is none.
// What such a runtime gives anyway (privileged, added capabilities, the
// host's PID, IPC and network namespaces) is not named.
func Unenforceable(pod *v1.Pod, c *v1.Container) string {
	if sc := c.SecurityContext; sc != nil {
		switch {
		case sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem:
			return "securityContext.readOnlyRootFilesystem"
		case sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation:
			return "securityContext.allowPrivilegeEscalation: false"
		case sc.Capabilities != nil && len(sc.Capabilities.Drop) > 0:
			return "securityContext.capabilities.drop"
		case sc.SeccompProfile != nil && sc.SeccompProfile.Type != v1.SeccompProfileTypeUnconfined:
			return "securityContext.seccompProfile"
		}
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		switch {
		case psc.SeccompProfile != nil && psc.SeccompProfile.Type != v1.SeccompProfileTypeUnconfined &&
			(c.SecurityContext == nil || c.SecurityContext.SeccompProfile == nil):
			return "securityContext.seccompProfile (of the pod)"
		case len(psc.Sysctls) > 0:
			return "securityContext.sysctls (of the pod)"
		}
	}
	if p := appArmorProfile(pod, c); p != nil && p.Type != v1.AppArmorProfileTypeUnconfined {
		return "an AppArmor profile"
	}
	return ""
}
