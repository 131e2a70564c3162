package eviction

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// ContainerStats are one container's measures. Rootfs is what stands for
// the writable layer in the process runtime: the instance's work directory.
type ContainerStats struct {
	Name                      string
	MemoryWorkingSet          int64
	LogsBytes, LogsInodes     int64
	RootfsBytes, RootfsInodes int64
	// What the stats endpoints show beside (internal/agent/nodestats).
	MemoryUsage, MemoryRSS  int64
	CPUUsageCoreNanoSeconds uint64
	StartedAt               time.Time
	Running                 bool
}

// VolumeStats are one volume's measures.
type VolumeStats struct {
	Name          string
	Bytes, Inodes int64
}

// PodStats are one pod's measures.
type PodStats struct {
	Containers []ContainerStats
	Volumes    []VolumeStats // the pod's local volumes (emptyDirs)
	Processes  int64
}

// Memory is the pod's working set: the sum of its containers'.
func (p PodStats) Memory() int64 {
	var n int64
	for _, c := range p.Containers {
		n += c.MemoryWorkingSet
	}
	return n
}

// disk is the pod's use of the node filesystem (bytes or inodes): with no
// image filesystem, containers' writable dirs and logs plus local volumes,
// as upstream ranks nodefs pressure without an imagefs.
func (p PodStats) disk(pod *v1.Pod, r v1.ResourceName) int64 {
	var n int64
	for _, c := range p.Containers {
		if r == resourceInodes {
			n += c.RootfsInodes + c.LogsInodes
		} else {
			n += c.RootfsBytes + c.LogsBytes
		}
	}
	local := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil || localEphemeral(v) {
			local[v.Name] = true
		}
	}
	for _, v := range p.Volumes {
		if !local[v.Name] {
			continue
		}
		if r == resourceInodes {
			n += v.Inodes
		} else {
			n += v.Bytes
		}
	}
	return n
}

// localEphemeral: volumes on the node's disk that go with the pod (a memory
// emptyDir is RAM, not disk), as upstream's IsLocalEphemeralVolume.
func localEphemeral(v v1.Volume) bool {
	return v.GitRepo != nil || v.ConfigMap != nil ||
		(v.EmptyDir != nil && v.EmptyDir.Medium == v1.StorageMediumDefault)
}

// StatsFunc finds a pod's measures; false when there are none.
type StatsFunc func(*v1.Pod) (PodStats, bool)

type cmpFunc func(a, b *v1.Pod) int

// Rank orders pods for eviction for signal s, first to evict first, as
// upstream: memory — usage above requests, then priority, then usage above
// requests; pids — priority, then process count; disk — usage above the
// ephemeral-storage request, then priority, then usage. Pods without
// measures go first.
func Rank(s Signal, pods []*v1.Pod, stats StatsFunc) {
	var cmps []cmpFunc
	switch r := signalResource[s]; r {
	case v1.ResourceMemory:
		cmps = []cmpFunc{exceeds(stats, r, func(p *v1.Pod, st PodStats) int64 { return st.Memory() }), priority,
			usage(stats, r, func(p *v1.Pod, st PodStats) int64 { return st.Memory() })}
	case resourcePids:
		cmps = []cmpFunc{priority, func(a, b *v1.Pod) int {
			sa, oka := stats(a)
			sb, okb := stats(b)
			if !oka || !okb {
				return cmpBool(!oka, !okb)
			}
			return cmpInt(sb.Processes, sa.Processes)
		}}
	default:
		measure := func(p *v1.Pod, st PodStats) int64 { return st.disk(p, r) }
		// The disk comparison subtracts the ephemeral-storage request even
		// for inodes: upstream does.
		cmps = []cmpFunc{exceeds(stats, r, measure), priority, usage(stats, v1.ResourceEphemeralStorage, measure)}
	}
	sort.SliceStable(pods, func(i, j int) bool {
		for _, c := range cmps {
			if r := c(pods[i], pods[j]); r != 0 {
				return r < 0
			}
		}
		return false
	})
}

// request is the pod's effective request of r (0 for inodes and pids).
func request(pod *v1.Pod, r v1.ResourceName) int64 {
	q := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[r]
	return q.Value()
}

func exceeds(stats StatsFunc, r v1.ResourceName, measure func(*v1.Pod, PodStats) int64) cmpFunc {
	return func(a, b *v1.Pod) int {
		sa, oka := stats(a)
		sb, okb := stats(b)
		if !oka || !okb {
			return cmpBool(!oka, !okb)
		}
		return cmpBool(measure(a, sa) > request(a, r), measure(b, sb) > request(b, r))
	}
}

func usage(stats StatsFunc, r v1.ResourceName, measure func(*v1.Pod, PodStats) int64) cmpFunc {
	return func(a, b *v1.Pod) int {
		sa, oka := stats(a)
		sb, okb := stats(b)
		if !oka || !okb {
			return cmpBool(!oka, !okb)
		}
		return cmpInt(measure(b, sb)-request(b, r), measure(a, sa)-request(a, r))
	}
}

func priority(a, b *v1.Pod) int {
	return cmpInt(int64(corev1helpers.PodPriority(a)), int64(corev1helpers.PodPriority(b)))
}

// cmpBool puts true first.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// containerUsage is a container's usage of r for the eviction message.
func containerUsage(c ContainerStats, r v1.ResourceName) *resource.Quantity {
	switch r {
	case v1.ResourceMemory:
		return resource.NewQuantity(c.MemoryWorkingSet, resource.BinarySI)
	case v1.ResourceEphemeralStorage:
		return resource.NewQuantity(c.RootfsBytes+c.LogsBytes, resource.BinarySI)
	}
	return nil
}
