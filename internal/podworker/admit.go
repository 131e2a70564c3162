package podworker

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// admit decides whether the node can take pod, as the kubelet's admission
// does: maxPods and allocatable cpu/memory against the pods already admitted.
// It returns the Failed status of a rejected pod, or nil.
func (m *Manager) admit(pod *v1.Pod) *v1.PodStatus {
	m.mu.Lock()
	extra := m.extraAdmit
	m.mu.Unlock()
	if extra != nil {
		if st := extra(pod); st != nil {
			return st
		}
	}
	active := m.activePods(pod.UID)
	if m.cfg.MaxPods > 0 && int32(len(active)) >= m.cfg.MaxPods {
		return rejection("OutOfpods", fmt.Sprintf("Node didn't have enough resource: pods, requested: 1, used: %d, capacity: %d",
			len(active), m.cfg.MaxPods))
	}
	if m.cfg.Allocatable == nil {
		return nil
	}
	var alloc v1.ResourceList // read only for a pod that requests something
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		want := podRequest(pod, name)
		if want.IsZero() {
			continue
		}
		if alloc == nil {
			alloc = m.cfg.Allocatable()
		}
		capacity, ok := alloc[name]
		if !ok {
			continue
		}
		used := resource.Quantity{}
		for _, p := range active {
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
			return rejection("OutOf"+string(name), fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
				name, req, usedV, capV))
		}
	}
	return nil
}

func rejection(reason, msg string) *v1.PodStatus {
	return &v1.PodStatus{Phase: v1.PodFailed, Reason: reason, Message: msg}
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
