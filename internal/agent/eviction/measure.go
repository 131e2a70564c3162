package eviction

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/host/diskusage"
	"github.com/podvisor/podvisor/internal/runtime"
)

// Host reads the node's signals.
type Host struct {
	DataDir    string // its filesystem is nodefs (and imagefs)
	CgroupRoot string // /sys/fs/cgroup
}

// Observe measures every signal. memory.available is as the kubelet's
// (cAdvisor's) on Linux: MemTotal less the root cgroup's working set (usage
// less inactive file pages); pid.available is min(pid_max, threads-max)
// less the running tasks of /proc/loadavg, as upstream's rlimit stats.
func (h Host) Observe() Observations {
	obs := Observations{}
	if total := memTotal(); total > 0 {
		if ws, ok := h.rootWorkingSet(total); ok {
			obs[MemoryAvailable] = Observation{Available: max(0, total-ws), Capacity: total}
		}
	}
	var st unix.Statfs_t
	if unix.Statfs(h.DataDir, &st) == nil {
		bytes := Observation{Available: int64(st.Bavail) * st.Bsize, Capacity: int64(st.Blocks) * st.Bsize}
		inodes := Observation{Available: int64(st.Ffree), Capacity: int64(st.Files)}
		for _, s := range []Signal{NodeFsAvailable, ImageFsAvailable, ContainerFsAvailable} {
			obs[s] = bytes
		}
		if st.Files > 0 { // some filesystems have no inode limit
			for _, s := range []Signal{NodeFsInodesFree, ImageFsInodesFree, ContainerFsInodes} {
				obs[s] = inodes
			}
		}
	}
	maxPID := int64(-1)
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		if n, ok := readInt(f); ok && (maxPID < 0 || n < maxPID) {
			maxPID = n
		}
	}
	if tasks, ok := runningTasks(); ok && maxPID > 0 {
		obs[PIDAvailable] = Observation{Available: maxPID - tasks, Capacity: maxPID}
	}
	return obs
}

func (h Host) rootWorkingSet(memTotal int64) (int64, bool) {
	v1dir := filepath.Join(h.CgroupRoot, "memory")
	if usage, ok := readInt(filepath.Join(v1dir, "memory.usage_in_bytes")); ok {
		return usage - statValue(filepath.Join(v1dir, "memory.stat"), "total_inactive_file"), true
	}
	// cgroup v2 has no memory.current at the root: usage is what meminfo
	// says is not free, as cAdvisor computes it.
	if free, ok := meminfo("MemFree:"); ok {
		return memTotal - free - statValue(filepath.Join(h.CgroupRoot, "memory.stat"), "inactive_file"), true
	}
	return 0, false
}

func memTotal() int64 { n, _ := meminfo("MemTotal:"); return n }

func meminfo(key string) (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == key {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}

func statValue(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func runningTasks() (int64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, false
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(total, 10, 64)
	return n, err == nil
}

func readInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// PodMeter measures pods through their runtime: which containers they
// have, and what each uses.
type PodMeter struct {
	Containers runtime.Containers
	Usage      runtime.Stats
	PodDir     func(*v1.Pod) string
	// PodProcesses, when set, counts a pod's processes from its pod-level
	// cgroup (a CRI runtime counts none per container); false: unknown,
	// the containers' counts are used.
	PodProcesses func(*v1.Pod) (int64, bool)
}

// Stats measures pods: per container (its latest instance) the memory
// working set and processes of its cgroup, its work directory and its log
// directory (every attempt, as upstream's pod log directory); per emptyDir
// its directory.
func (pm PodMeter) Stats(ctx context.Context, pods []*v1.Pod) StatsFunc {
	list, _ := pm.Containers.List(ctx)
	latest := map[types.UID]map[string]runtime.Status{}
	for _, s := range list {
		uid := types.UID(s.PodUID)
		if latest[uid] == nil {
			latest[uid] = map[string]runtime.Status{}
		}
		if cur, ok := latest[uid][s.Name]; !ok || s.Attempt > cur.Attempt {
			latest[uid][s.Name] = s
		}
	}
	out := map[types.UID]PodStats{}
	for _, pod := range pods {
		var ps PodStats
		dir := pm.PodDir(pod)
		for _, name := range containerNames(pod) {
			s, ok := latest[pod.UID][name]
			if !ok {
				continue
			}
			u, _ := pm.Usage.Usage(ctx, s.ID)
			logs := diskusage.Of(filepath.Join(dir, name))
			ps.Containers = append(ps.Containers, ContainerStats{
				Name: name, MemoryWorkingSet: u.MemoryWorkingSet,
				LogsBytes: logs.Bytes, LogsInodes: logs.Inodes,
				RootfsBytes: u.WritableBytes, RootfsInodes: u.WritableInodes,
				MemoryUsage: u.MemoryUsage, MemoryRSS: u.MemoryRSS, CPUUsageCoreNanoSeconds: u.CPUUsageCoreNanoSeconds,
				StartedAt: s.StartedAt, Running: s.State == runtime.StateRunning,
			})
			if s.State == runtime.StateRunning {
				ps.Processes += u.Processes
			}
		}
		for _, v := range pod.Spec.Volumes {
			if v.EmptyDir == nil {
				continue
			}
			du := diskusage.Of(filepath.Join(dir, "volumes", "kubernetes.io~empty-dir", v.Name))
			ps.Volumes = append(ps.Volumes, VolumeStats{Name: v.Name, Bytes: du.Bytes, Inodes: du.Inodes})
		}
		if pm.PodProcesses != nil {
			if n, ok := pm.PodProcesses(pod); ok {
				ps.Processes = n
			}
		}
		out[pod.UID] = ps
	}
	return func(p *v1.Pod) (PodStats, bool) { s, ok := out[p.UID]; return s, ok }
}

// containerNames in spec order: the message lists containers in this order.
func containerNames(pod *v1.Pod) []string {
	var out []string
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Name)
	}
	for _, c := range pod.Spec.InitContainers {
		out = append(out, c.Name)
	}
	return out
}

// NodeUsage is the node's CPU time and memory as the stats endpoints show
// them (internal/agent/nodestats): cAdvisor's root cgroup figures.
type NodeUsage struct {
	CPUUsageCoreNanoSeconds uint64
	CPUOK                   bool
	MemoryWorkingSet        int64
	MemoryUsage             int64
	MemoryAvailable         int64
	MemoryOK                bool
}

// Usage measures the node: memory as Observe (total less the root
// working set), CPU time from the root cgroup (v1's cpuacct.usage, in
// whichever hierarchy holds it; v2's cpu.stat).
func (h Host) Usage() NodeUsage {
	var u NodeUsage
	if total := memTotal(); total > 0 {
		if ws, ok := h.rootWorkingSet(total); ok {
			u.MemoryWorkingSet, u.MemoryAvailable, u.MemoryOK = ws, max(0, total-ws), true
			u.MemoryUsage = ws
			if usage, ok := readInt(filepath.Join(h.CgroupRoot, "memory", "memory.usage_in_bytes")); ok {
				u.MemoryUsage = usage
			}
		}
	}
	for _, f := range []string{"cpuacct/cpuacct.usage", "cpu,cpuacct/cpuacct.usage", "cpu/cpuacct.usage"} {
		if n, ok := readInt(filepath.Join(h.CgroupRoot, f)); ok {
			u.CPUUsageCoreNanoSeconds, u.CPUOK = uint64(n), true
			return u
		}
	}
	if us := statValue(filepath.Join(h.CgroupRoot, "cpu.stat"), "usage_usec"); us > 0 {
		u.CPUUsageCoreNanoSeconds, u.CPUOK = uint64(us)*1000, true
	}
	return u
}
