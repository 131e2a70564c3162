package podworker

import (
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/admission"
	"github.com/podvisor/podvisor/internal/agent/podsecurity"
)

// admit gathers what admission looks at (the node as it is now, the pods
// already admitted, the node's checks) and returns its refusal, or nil.
func (m *Manager) admit(pod *v1.Pod) *admission.Refusal {
	in := admission.Input{MaxPods: m.cfg.MaxPods}
	if m.cfg.Sysctls != nil {
		in.Sysctls = m.cfg.Sysctls.Admit
	}
	if m.cfg.Runtime.Features.Security {
		in.AppArmor, in.HostAppArmor = true, appArmorEnabled()
	}
	if m.cfg.Node != nil {
		n, err := m.cfg.Node()
		if err != nil || n == nil {
			m.cfg.Log.Warn("admission: cannot get the node", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		} else {
			in.Node = n
		}
	} else {
		in.Node = &v1.Node{}
		in.Node.Name = m.cfg.NodeName
		if m.cfg.Allocatable != nil {
			in.Node.Status.Allocatable = m.cfg.Allocatable()
		}
	}
	if in.Node != nil {
		in.Others = m.activePods(pod.UID)
	}
	m.mu.Lock()
	in.Extra = m.extraAdmit
	m.mu.Unlock()
	return admission.Admit(pod, in)
}

// appArmorEnabled reads once whether the host enforces AppArmor (the
// kubelet checks at start; a restart is needed to change it).
var appArmorEnabled = sync.OnceValue(podsecurity.AppArmorEnabled)
