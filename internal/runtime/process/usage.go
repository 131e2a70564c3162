package process

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/podvisor/podvisor/internal/diskusage"
)

// Usage is what one container instance uses, for eviction.
type Usage struct {
	// MemoryWorkingSet is the cgroup's usage less its inactive file pages,
	// as cAdvisor's working set; 0 without a cgroup.
	MemoryWorkingSet int64
	// Processes are the tasks in the cgroup (0 without one).
	Processes int64
	// Writable is the instance's work directory: what stands for a
	// container's writable layer in the process runtime.
	Writable diskusage.Usage
}

// Usage measures instance id. A container without cgroups (not root) has no
// memory or process measure.
func (r *Runtime) Usage(id string) (Usage, error) {
	d, err := r.dir(id)
	if err != nil {
		return Usage{}, err
	}
	var u Usage
	u.Writable = diskusage.Of(d.path(workDir))
	st, err := d.readState()
	if err != nil {
		return u, nil
	}
	for _, dir := range st.Cgroups {
		if n, ok := workingSet(dir); ok {
			u.MemoryWorkingSet = n
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

// workingSet reads a memory cgroup directory (v1 or v2); false when dir is
// not one.
func workingSet(dir string) (int64, bool) {
	usage, ok := readCgroupInt(filepath.Join(dir, "memory.usage_in_bytes")) // v1
	inactiveKey := "total_inactive_file"
	if !ok {
		usage, ok = readCgroupInt(filepath.Join(dir, "memory.current")) // v2
		inactiveKey = "inactive_file"
	}
	if !ok {
		return 0, false
	}
	if b, err := os.ReadFile(filepath.Join(dir, "memory.stat")); err == nil {
		if inactive, ok := keyedValue(b, inactiveKey); ok {
			usage -= min(inactive, usage)
		}
	}
	return usage, true
}

func readCgroupInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
