// Package podcgroup is the kubelet's pod-level cgroup hierarchy on a
// cgroupfs node: every pod's sandbox and containers live in one cgroup per
// pod, under its QoS class (/kubepods/pod<uid> for Guaranteed,
// /kubepods/burstable/pod<uid>, /kubepods/besteffort/pod<uid>), and that
// cgroup holds the pod's summed limits, so that a pod as a whole cannot
// take more than it asked for.
//
// Config computes what the cgroup gets (pure, table-tested); Manager
// writes it under /sys/fs/cgroup (v1 hierarchies or v2) and removes it
// with the pod.
//
// Upstream: https://kubernetes.io/docs/concepts/workloads/pods/pod-qos/ and
// the kubelet's pod container manager (pkg/kubelet/cm, ResourceConfigForPod).
package podcgroup

import (
	"path"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Root is the cgroup of all pods (the kubelet's with cgroupRoot "/").
const Root = "/kubepods"

// Upstream's bounds (pkg/kubelet/cm): shares of a pod without CPU requests,
// the largest shares, the CFS period and the smallest quota.
const (
	MinShares     = 2
	MaxShares     = 262144
	CPUPeriod     = 100000
	MinQuotaUsecs = 1000
)

// Parent is the pod's cgroup (the sandbox's CgroupParent).
func Parent(uid string, qos v1.PodQOSClass) string {
	pod := "pod" + uid
	switch qos {
	case v1.PodQOSGuaranteed:
		return path.Join(Root, pod)
	case v1.PodQOSBurstable:
		return path.Join(Root, "burstable", pod)
	}
	return path.Join(Root, "besteffort", pod)
}

// Limits is what the pod's cgroup gets; a zero field is not set.
type Limits struct {
	CPUShares   uint64
	CPUQuota    int64 // per CPUPeriod
	MemoryBytes int64
}

// Config is the pod cgroup's limits, as the kubelet's: CPU shares from the
// summed CPU requests (2 for BestEffort); the CPU quota and the memory
// limit from the summed limits, when every container declares one (always
// for Guaranteed). Sums follow upstream (init containers' peak, sidecars
// and pod overhead included).
func Config(pod *v1.Pod, qos v1.PodQOSClass) Limits {
	if qos == v1.PodQOSBestEffort {
		return Limits{CPUShares: MinShares}
	}
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	lims := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	l := Limits{CPUShares: shares(reqs.Cpu().MilliValue())}
	cpuDeclared, memDeclared := true, true
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Resources.Limits.Cpu().IsZero() {
				cpuDeclared = false
			}
			if c.Resources.Limits.Memory().IsZero() {
				memDeclared = false
			}
		}
	}
	if qos == v1.PodQOSGuaranteed || cpuDeclared {
		l.CPUQuota = quota(lims.Cpu().MilliValue())
	}
	if qos == v1.PodQOSGuaranteed || memDeclared {
		l.MemoryBytes = lims.Memory().Value()
	}
	return l
}

func shares(milliCPU int64) uint64 {
	if milliCPU == 0 {
		return MinShares
	}
	s := milliCPU * 1024 / 1000
	return uint64(min(max(s, MinShares), MaxShares))
}

func quota(milliCPU int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	return max(milliCPU*CPUPeriod/1000, MinQuotaUsecs)
}

// Larger is, field by field, the larger of a and b (a limit not set, 0,
// is the largest): what a pod's cgroup holds while its containers are
// resized from one to the other, so that neither the old nor the new
// container limits exceed it meanwhile.
func Larger(a, b Limits) Limits {
	limit := func(x, y int64) int64 {
		if x == 0 || y == 0 {
			return 0
		}
		return max(x, y)
	}
	return Limits{CPUShares: max(a.CPUShares, b.CPUShares), CPUQuota: limit(a.CPUQuota, b.CPUQuota), MemoryBytes: limit(a.MemoryBytes, b.MemoryBytes)}
}
