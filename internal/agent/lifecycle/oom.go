package lifecycle

import (
	v1 "k8s.io/api/core/v1"
)

// OOM score adjustments of the kubelet's QoS policy.
const (
	oomGuaranteed = -997
	oomBestEffort = 1000
)

// OOMScoreAdj is the oom_score_adj of a container's processes, by
// upstream's QoS policy: Guaranteed (and node-critical pods) -997,
// BestEffort 1000, Burstable 1000 less the container's share of the node's
// memory in thousandths, kept within 3..999 (a sidecar no higher than the
// pod's smallest regular container). pod's resources are its allocation.
// 0 (the runtime's own) without a memory capacity to compare with.
func OOMScoreAdj(pod *v1.Pod, c *v1.Container, memoryCapacity int64) int {
	if pod.Spec.PriorityClassName == "system-node-critical" && pod.Spec.Priority != nil && *pod.Spec.Priority >= 2000000000 {
		return oomGuaranteed
	}
	switch QOSClass(pod) {
	case v1.PodQOSGuaranteed:
		return oomGuaranteed
	case v1.PodQOSBestEffort:
		return oomBestEffort
	}
	if memoryCapacity <= 0 {
		return 0
	}
	adj := 1000 - 1000*c.Resources.Requests.Memory().Value()/memoryCapacity
	if isSidecar(c) && isInitContainer(pod, c.Name) {
		if len(pod.Spec.Containers) > 0 {
			least := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
			for _, r := range pod.Spec.Containers[1:] {
				least = min(least, r.Resources.Requests.Memory().Value())
			}
			adj = min(adj, 1000-1000*least/memoryCapacity)
		}
	}
	switch {
	case adj < 1000+oomGuaranteed:
		return 1000 + oomGuaranteed
	case adj == oomBestEffort:
		return oomBestEffort - 1 // a Burstable container outlives a BestEffort one
	}
	return int(adj)
}

func isInitContainer(pod *v1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}
