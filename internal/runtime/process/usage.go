package process

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/podvisor/podvisor/internal/diskusage"
	"github.com/podvisor/podvisor/internal/runtime"
)

// Usage measures instance id: memory working set and tasks of its cgroup
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
