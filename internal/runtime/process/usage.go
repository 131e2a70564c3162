package process

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/podvisor/podvisor/internal/host/diskusage"
	"github.com/podvisor/podvisor/internal/runtime"
)

// Usage measures instance id: memory, CPU time and tasks of its cgroup
// (none without one, when not root), and its work directory, which stands
// for a container's writable layer here.
func (r *Runtime) Usage(_ context.Context, id string) (runtime.Usage, error) {
	d, err := r.dir(id)
	if err != nil {
		return runtime.Usage{}, err
	}
	var u runtime.Usage
	w := diskusage.Of(d.path(workDir))
	u.WritableBytes, u.WritableInodes = w.Bytes, w.Inodes
	st, err := d.readState()
	if err != nil {
		return u, nil
	}
	for _, dir := range st.Cgroups {
		if ws, usage, rss, ok := memory(dir); ok {
			u.MemoryWorkingSet, u.MemoryUsage, u.MemoryRSS = ws, usage, rss
		}
		if n, ok := cpuTime(dir); ok {
			u.CPUUsageCoreNanoSeconds = n
		}
		if n, ok := readCgroupInt(filepath.Join(dir, "pids.current")); ok {
			u.Processes = n
		}
	}
	if u.Processes == 0 {
		u.Processes = int64(len(cgroupSet{Dirs: st.Cgroups}.procs()))
	}
	return u, nil
}

// memory reads a memory cgroup directory (v1 or v2): working set (usage
// less inactive file pages), usage and RSS, as cAdvisor's; false when dir
// is not one.
func memory(dir string) (workingSet, usage, rss int64, ok bool) {
	usage, ok = readCgroupInt(filepath.Join(dir, "memory.usage_in_bytes")) // v1
	inactiveKey, rssKey := "total_inactive_file", "total_rss"
	if !ok {
		usage, ok = readCgroupInt(filepath.Join(dir, "memory.current")) // v2
		inactiveKey, rssKey = "inactive_file", "anon"
	}
	if !ok {
		return 0, 0, 0, false
	}
	workingSet = usage
	if b, err := os.ReadFile(filepath.Join(dir, "memory.stat")); err == nil {
		if inactive, ok := keyedValue(b, inactiveKey); ok {
			workingSet -= min(inactive, usage)
		}
		rss, _ = keyedValue(b, rssKey)
	}
	return workingSet, usage, rss, true
}

// cpuTime reads the CPU time a cgroup used, in nanoseconds: v1's
// cpuacct.usage (in the cpuacct hierarchy, which here may not be the cpu
// one), v2's cpu.stat usage_usec; false when dir has neither.
func cpuTime(dir string) (uint64, bool) {
	if n, ok := readCgroupInt(filepath.Join(dir, "cpuacct.usage")); ok {
		return uint64(n), true
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.stat")); err == nil {
		if us, ok := keyedValue(b, "usage_usec"); ok {
			return uint64(us) * 1000, true
		}
	}
	return 0, false
}

func readCgroupInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
