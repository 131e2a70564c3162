package podworker

import (
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podvisor/podvisor/internal/podsecurity"
)

// Admission reasons of the kubelet that need nothing but the pod, the node
// and the pods already admitted.
const (
	ReasonInvalidNodeInfo = "InvalidNodeInfo"
	messageInvalidNode    = "Kubelet cannot get node info."
)

// admission is a refusal: upstream's PodAdmitResult reason and message (the
// event's message; the status adds "Pod was rejected: ").
type admission struct {
	Reason, Message string
}

// admit decides whether the node can take pod, as the kubelet's admission
// handlers do, in their order: the node's predicates (OS, resources, node
// affinity, node name, NoExecute taints) first, then the node shutdown
// manager's. It returns the refusal, or nil.
func (m *Manager) admit(pod *v1.Pod) *admission {
	if m.cfg.Sysctls != nil {
		// Before the node's predicates, as the kubelet's handlers are ordered.
		if msg, ok := m.cfg.Sysctls.Admit(pod); !ok {
			return &admission{podsecurity.ReasonSysctlForbidden, msg}
		}
	}
	if m.cfg.Runtime != nil && m.cfg.Runtime.Features().Security {
		if msg, ok := podsecurity.AdmitAppArmor(pod, appArmorEnabled()); !ok {
			return &admission{podsecurity.ReasonAppArmor, msg}
		}
	}
	node := &v1.Node{}
	if m.cfg.Node != nil {
		n, err := m.cfg.Node()
		if err != nil || n == nil {
			m.cfg.Log.Warn("admission: cannot get the node", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			return &admission{ReasonInvalidNodeInfo, messageInvalidNode}
		}
		node = n
	} else {
		node.Name = m.cfg.NodeName
		if m.cfg.Allocatable != nil {
			node.Status.Allocatable = m.cfg.Allocatable()
		}
	}
	if a := admitOnNode(pod, node, m.activePods(pod.UID), m.cfg.MaxPods); a != nil {
		return a
	}
	m.mu.Lock()
	extra := m.extraAdmit
	m.mu.Unlock()
	if extra != nil {
		if st := extra(pod); st != nil {
			return &admission{st.Reason, st.Message}
		}
	}
	return nil
}

// fitsResources is upstream's resource fit: one more pod within maxPods, and
// cpu and memory requests within the node's allocatable.
func fitsResources(pod *v1.Pod, alloc v1.ResourceList, others []*v1.Pod, maxPods int32) *admission {
	if maxPods > 0 && int32(len(others)) >= maxPods {
		return &admission{"OutOfpods", fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d",
			len(others), maxPods)}
	}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		want := podRequest(pod, name)
		if want.IsZero() {
			continue
		}
		capacity, ok := alloc[name]
		if !ok {
			continue
		}
		used := resource.Quantity{}
		for _, p := range others {
			r := podRequest(p, name)
			used.Add(r)
		}
		total := used.DeepCopy()
		total.Add(want)
		if total.Cmp(capacity) > 0 {
			req, usedV, capV := want.Value(), used.Value(), capacity.Value()
			if name == v1.ResourceCPU {
				req, usedV, capV = want.MilliValue(), used.MilliValue(), capacity.MilliValue()
			}
			return &admission{"OutOf" + string(name), fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
				name, req, usedV, capV)}
		}
	}
	return nil
}

// podRequest is the effective request: the larger of the sum of regular (and
// sidecar) containers and the largest regular init container, as upstream.
func podRequest(pod *v1.Pod, name v1.ResourceName) resource.Quantity {
	sum := resource.Quantity{}
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Requests[name]; ok {
			sum.Add(q)
		}
	}
	initMax := resource.Quantity{}
	for _, c := range pod.Spec.InitContainers {
		q, ok := c.Resources.Requests[name]
		if !ok {
			continue
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sum.Add(q)
			continue
		}
		if q.Cmp(initMax) > 0 {
			initMax = q
		}
	}
	if initMax.Cmp(sum) > 0 {
		return initMax
	}
	if o, ok := pod.Spec.Overhead[name]; ok {
		sum.Add(o)
	}
	return sum
}

// appArmorEnabled reads once whether the host enforces AppArmor (the
// kubelet checks at start; a restart is needed to change it).
var appArmorEnabled = sync.OnceValue(podsecurity.AppArmorEnabled)
