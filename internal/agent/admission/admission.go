// Package admission decides whether the node takes a pod, as the kubelet's
// admission handlers do, in their order: sysctls, AppArmor, the node's
// predicates (OS, resources, node affinity, node name, host ports, NoExecute
// taints), then the node shutdown manager's check. Its decisions are pure:
// the agent gathers the node and the pods already admitted and executes the
// verdict (a Failed pod with the reason and message, and an event).
package admission

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podvisor/podvisor/internal/agent/podsecurity"
)

// Admission reasons of the kubelet that need nothing but the pod, the node
// and the pods already admitted.
const (
	ReasonInvalidNodeInfo = "InvalidNodeInfo"
	MessageInvalidNode    = "Kubelet cannot get node info."
)

// Refusal is a pod the node does not take: upstream's PodAdmitResult reason
// and message (the event's message; the status adds "Pod was rejected: ").
type Refusal struct {
	Reason, Message string
}

// Input is what admission looks at beside the pod.
type Input struct {
	// Node is the node as it is now; nil when it cannot be read
	// (InvalidNodeInfo).
	Node *v1.Node
	// Others are the pods already admitted that are not terminal.
	Others  []*v1.Pod
	MaxPods int32
	// Sysctls checks the pod's sysctls against the node's allowlist; nil:
	// no check.
	Sysctls func(*v1.Pod) (msg string, ok bool)
	// AppArmor: the runtime enforces security profiles; HostAppArmor: the
	// host enforces AppArmor.
	AppArmor, HostAppArmor bool
	// Extra runs last (the node shutdown manager refuses new pods with it);
	// nil: none.
	Extra func(*v1.Pod) *v1.PodStatus
}

// Admit decides whether the node can take pod, as the kubelet's admission
// handlers do, in their order. It returns the refusal, or nil.
func Admit(pod *v1.Pod, in Input) *Refusal {
	if in.Sysctls != nil {
		// Before the node's predicates, as the kubelet's handlers are ordered.
		if msg, ok := in.Sysctls(pod); !ok {
			return &Refusal{podsecurity.ReasonSysctlForbidden, msg}
		}
	}
	if in.AppArmor {
		if msg, ok := podsecurity.AdmitAppArmor(pod, in.HostAppArmor); !ok {
			return &Refusal{podsecurity.ReasonAppArmor, msg}
		}
	}
	if in.Node == nil {
		return &Refusal{ReasonInvalidNodeInfo, MessageInvalidNode}
	}
	if a := Node(pod, in.Node, in.Others, in.MaxPods); a != nil {
		return a
	}
	if in.Extra != nil {
		if st := in.Extra(pod); st != nil {
			return &Refusal{st.Reason, st.Message}
		}
	}
	return nil
}

// Resources is upstream's resource fit: one more pod within maxPods, and
// cpu and memory requests within the node's allocatable.
func Resources(pod *v1.Pod, alloc v1.ResourceList, others []*v1.Pod, maxPods int32) *Refusal {
	if maxPods > 0 && int32(len(others)) >= maxPods {
		return &Refusal{"OutOfpods", fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d",
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
			return &Refusal{"OutOf" + string(name), fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
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
