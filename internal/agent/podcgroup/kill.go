package podcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// KillProcesses sends SIGKILL to every process in the pod's cgroup and the
// cgroups below it (its containers'), and returns their PIDs: for what is
// left once the pod's containers and sandboxes are stopped, which nothing
// else will end. On v1 the pids hierarchy is read: a process is in every
// hierarchy, and pids is the one Processes counts.
func (m *Manager) KillProcesses(parent string) ([]int, error) {
	dir := filepath.Join(m.mount, parent)
	if !m.v2 {
		dir = filepath.Join(m.mount, "pids", parent)
	}
	var pids []int
	var errs []error
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || pid <= 0 {
				continue
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d in %s: %w", pid, path, err))
				continue
			}
			pids = append(pids, pid)
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return pids, errors.Join(errs...)
}
