// Package nodestats is the node's figures in the kubelet's formats: the
// summary API (/stats/summary, k8s.io/kubelet/pkg/apis/stats/v1alpha1) and
// the resource metrics (/metrics/resource). The figures are the eviction
// manager's (internal/agent/eviction measures pods and the host); Build is pure,
// Source samples and keeps the last sample for CPU rates.
package nodestats

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/eviction"
)

// Input is one sample of everything the summary shows.
type Input struct {
	Now       time.Time
	NodeName  string
	NodeStart time.Time
	Node      eviction.NodeUsage
	Host      eviction.Observations // filesystems and PIDs, as eviction observes them
	Pods      []*v1.Pod
	Stats     eviction.StatsFunc
	// Volumes are the figures of pods' volumes measured elsewhere (CSI
	// volumes, by their drivers), by pod UID: listed, not counted in the
	// pod's ephemeral storage.
	Volumes map[types.UID][]statsapi.VolumeStats
}

// CPUSample is a cumulative CPU time at a time, the base of the next rate.
type CPUSample struct {
	At    time.Time
	Total uint64
}

// nodeKey keys the node's sample among the containers' (which are
// namespace/pod/uid/container).
const nodeKey = ""

// Build makes the summary from in. prev holds the CPU samples of the
// previous build (nil at first): usageNanoCores is the rate between that
// sample and this one, absent without one (as the kubelet before its
// second housekeeping). It returns this build's samples for the next.
func Build(in Input, prev map[string]CPUSample) (statsapi.Summary, map[string]CPUSample) {
	now := metav1.NewTime(in.Now)
	next := map[string]CPUSample{}
	cpu := func(key string, total uint64) *statsapi.CPUStats {
		next[key] = CPUSample{At: in.Now, Total: total}
		st := &statsapi.CPUStats{Time: now, UsageCoreNanoSeconds: ptr(total)}
		if p, ok := prev[key]; ok && in.Now.After(p.At) && total >= p.Total {
			st.UsageNanoCores = ptr(uint64(float64(total-p.Total) / in.Now.Sub(p.At).Seconds()))
		}
		return st
	}
	node := statsapi.NodeStats{NodeName: in.NodeName, StartTime: metav1.NewTime(in.NodeStart)}
	if in.Node.CPUOK {
		node.CPU = cpu(nodeKey, in.Node.CPUUsageCoreNanoSeconds)
	}
	if in.Node.MemoryOK {
		node.Memory = &statsapi.MemoryStats{Time: now,
			AvailableBytes:  uptr(in.Node.MemoryAvailable),
			UsageBytes:      uptr(in.Node.MemoryUsage),
			WorkingSetBytes: uptr(in.Node.MemoryWorkingSet)}
	}
	nodeFs := fsOf(now, in.Host, eviction.NodeFsAvailable, eviction.NodeFsInodesFree)
	node.Fs = nodeFs
	if imageFs := fsOf(now, in.Host, eviction.ImageFsAvailable, eviction.ImageFsInodesFree); imageFs != nil {
		node.Runtime = &statsapi.RuntimeStats{ImageFs: imageFs, ContainerFs: fsOf(now, in.Host, eviction.ContainerFsAvailable, eviction.ContainerFsInodes)}
	}
	if pids, ok := in.Host[eviction.PIDAvailable]; ok {
		node.Rlimit = &statsapi.RlimitStats{Time: now, MaxPID: ptr(pids.Capacity), NumOfRunningProcesses: ptr(pids.Capacity - pids.Available)}
	}

	sum := statsapi.Summary{Node: node, Pods: []statsapi.PodStats{}}
	for _, pod := range in.Pods {
		st, ok := in.Stats(pod)
		if !ok {
			continue
		}
		ps := statsapi.PodStats{
			PodRef:     statsapi.PodReference{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID)},
			Containers: []statsapi.ContainerStats{},
		}
		if pod.Status.StartTime != nil {
			ps.StartTime = *pod.Status.StartTime
		}
		var podCPU uint64
		var podWS, podUsage, podRSS, ephBytes, ephInodes int64
		for _, c := range st.Containers {
			ephBytes += c.RootfsBytes + c.LogsBytes
			ephInodes += c.RootfsInodes + c.LogsInodes
			if !c.Running {
				continue // the kubelet lists running containers only
			}
			key := pod.Namespace + "/" + pod.Name + "/" + string(pod.UID) + "/" + c.Name + "@" + c.StartedAt.String()
			podCPU += c.CPUUsageCoreNanoSeconds
			podWS, podUsage, podRSS = podWS+c.MemoryWorkingSet, podUsage+c.MemoryUsage, podRSS+c.MemoryRSS
			ps.Containers = append(ps.Containers, statsapi.ContainerStats{
				Name:      c.Name,
				StartTime: metav1.NewTime(c.StartedAt),
				CPU:       cpu(key, c.CPUUsageCoreNanoSeconds),
				Memory:    memory(now, c.MemoryWorkingSet, c.MemoryUsage, c.MemoryRSS),
				Rootfs:    used(now, nodeFs, c.RootfsBytes, c.RootfsInodes),
				Logs:      used(now, nodeFs, c.LogsBytes, c.LogsInodes),
			})
		}
		for _, v := range st.Volumes {
			ephBytes, ephInodes = ephBytes+v.Bytes, ephInodes+v.Inodes
			ps.VolumeStats = append(ps.VolumeStats, statsapi.VolumeStats{Name: v.Name, FsStats: *used(now, nodeFs, v.Bytes, v.Inodes)})
		}
		ps.VolumeStats = append(ps.VolumeStats, in.Volumes[pod.UID]...)
		if len(ps.Containers) > 0 {
			ps.CPU = cpu(pod.Namespace+"/"+pod.Name+"/"+string(pod.UID), podCPU)
			ps.Memory = memory(now, podWS, podUsage, podRSS)
		}
		ps.EphemeralStorage = used(now, nodeFs, ephBytes, ephInodes)
		if st.Processes > 0 {
			ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: ptr(uint64(st.Processes))}
		}
		sum.Pods = append(sum.Pods, ps)
	}
	return sum, next
}

// CPUAndMemory keeps of s only what ?only_cpu_and_memory=true asks for, as
// the kubelet: node and pods with their containers' CPU and memory.
func CPUAndMemory(s statsapi.Summary) statsapi.Summary {
	out := statsapi.Summary{Node: statsapi.NodeStats{NodeName: s.Node.NodeName, StartTime: s.Node.StartTime, CPU: s.Node.CPU, Memory: s.Node.Memory},
		Pods: make([]statsapi.PodStats, 0, len(s.Pods))}
	for _, p := range s.Pods {
		q := statsapi.PodStats{PodRef: p.PodRef, StartTime: p.StartTime, CPU: p.CPU, Memory: p.Memory, Containers: make([]statsapi.ContainerStats, 0, len(p.Containers))}
		for _, c := range p.Containers {
			q.Containers = append(q.Containers, statsapi.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory})
		}
		out.Pods = append(out.Pods, q)
	}
	return out
}

func fsOf(now metav1.Time, obs eviction.Observations, bytes, inodes eviction.Signal) *statsapi.FsStats {
	b, ok := obs[bytes]
	if !ok {
		return nil
	}
	fs := &statsapi.FsStats{Time: now, AvailableBytes: uptr(b.Available), CapacityBytes: uptr(b.Capacity), UsedBytes: uptr(b.Capacity - b.Available)}
	if i, ok := obs[inodes]; ok {
		fs.InodesFree, fs.Inodes, fs.InodesUsed = uptr(i.Available), uptr(i.Capacity), uptr(i.Capacity-i.Available)
	}
	return fs
}

// used is a share of fs (a container's layer or logs, a volume): its own
// use, with the filesystem's available and capacity, as the kubelet's.
func used(now metav1.Time, fs *statsapi.FsStats, bytes, inodes int64) *statsapi.FsStats {
	out := &statsapi.FsStats{Time: now, UsedBytes: uptr(bytes), InodesUsed: uptr(inodes)}
	if fs != nil {
		out.AvailableBytes, out.CapacityBytes, out.InodesFree, out.Inodes = fs.AvailableBytes, fs.CapacityBytes, fs.InodesFree, fs.Inodes
	}
	return out
}

func memory(now metav1.Time, ws, usage, rss int64) *statsapi.MemoryStats {
	return &statsapi.MemoryStats{Time: now, WorkingSetBytes: uptr(ws), UsageBytes: uptr(usage), RSSBytes: uptr(rss)}
}

func ptr[T any](v T) *T { return &v }

func uptr(n int64) *uint64 { return ptr(uint64(max(n, 0))) }

// Source samples the node for the endpoints.
type Source struct {
	NodeName  string
	NodeStart time.Time
	Host      interface {
		Usage() eviction.NodeUsage
		Observe() eviction.Observations
	}
	Pods  func() []*v1.Pod
	Stats func(context.Context, []*v1.Pod) eviction.StatsFunc
	// Volumes measures a pod's volumes beyond the emptyDirs (nil: none).
	Volumes func(context.Context, *v1.Pod) []statsapi.VolumeStats
	Clock   clock.Clock // nil: the real clock

	mu   sync.Mutex
	prev map[string]CPUSample
}

// Summary samples the node and its pods now.
func (s *Source) Summary(ctx context.Context) statsapi.Summary { return s.sample(ctx, true) }

// CPUAndMemory samples what ?only_cpu_and_memory=true and the resource
// metrics show: without the volumes, so that their scrapes never call a
// CSI driver.
func (s *Source) CPUAndMemory(ctx context.Context) statsapi.Summary {
	return CPUAndMemory(s.sample(ctx, false))
}

func (s *Source) sample(ctx context.Context, volumes bool) statsapi.Summary {
	c := s.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	pods := s.Pods()
	in := Input{NodeName: s.NodeName, NodeStart: s.NodeStart, Node: s.Host.Usage(), Host: s.Host.Observe(),
		Pods: pods, Stats: s.Stats(ctx, pods)}
	if volumes && s.Volumes != nil {
		in.Volumes = map[types.UID][]statsapi.VolumeStats{}
		for _, pod := range pods {
			if vs := s.Volumes(ctx, pod); len(vs) > 0 {
				in.Volumes[pod.UID] = vs
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in.Now = c.Now()
	sum, next := Build(in, s.prev)
	s.prev = next
	return sum
}

// BootTime is when the machine booted (/proc/stat btime), the node's start
// time as the kubelet's (its root cgroup's); the zero time if unreadable.
func BootTime() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(n, 0)
			}
		}
	}
	return time.Time{}
}
