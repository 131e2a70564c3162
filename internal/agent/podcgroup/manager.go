package podcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Manager makes and removes pod cgroups under a cgroup mount (normally
// /sys/fs/cgroup), v2 or the v1 hierarchies cpu, memory and pids.
type Manager struct {
	mount string
	v2    bool
	// besteffortSet: the v1 BestEffort cgroup has its shares (written by
	// the first Ensure, not at every pod's start).
	besteffortSet atomic.Bool
}

// v1Hierarchies are the v1 controllers a pod cgroup is made in (the
// container runtime makes its containers' in every hierarchy it uses, below
// the same path).
var v1Hierarchies = []string{"cpu", "memory", "pids"}

// New returns a manager for the cgroup file system at mount.
func New(mount string) (*Manager, error) {
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err == nil {
		return &Manager{mount: mount, v2: true}, nil
	}
	for _, h := range v1Hierarchies {
		if _, err := os.Stat(filepath.Join(mount, h)); err != nil {
			return nil, fmt.Errorf("pod cgroups: no cgroup v1 hierarchy %s under %s", h, mount)
		}
	}
	return &Manager{mount: mount}, nil
}

// Ensure makes the pod's cgroup (and its QoS parents) and writes its
// limits. The BestEffort class gets the fewest CPU shares.
func (m *Manager) Ensure(parent string, l Limits) error {
	if m.v2 {
		return m.ensureV2(parent, l)
	}
	for _, h := range v1Hierarchies {
		if err := os.MkdirAll(filepath.Join(m.mount, h, parent), 0o755); err != nil {
			return fmt.Errorf("pod cgroup %s: %w", parent, err)
		}
	}
	if !m.besteffortSet.Load() {
		besteffort := filepath.Join(m.mount, "cpu", Root, "besteffort")
		if err := os.MkdirAll(besteffort, 0o755); err != nil {
			return fmt.Errorf("pod cgroup %s: %w", parent, err)
		}
		if err := m.write(besteffort, "cpu.shares", strconv.Itoa(MinShares)); err != nil {
			return err
		}
		m.besteffortSet.Store(true)
	}
	dir := filepath.Join(m.mount, "cpu", parent)
	if err := m.write(dir, "cpu.shares", strconv.FormatUint(l.CPUShares, 10)); err != nil {
		return err
	}
	if l.CPUQuota > 0 {
		if err := m.write(dir, "cpu.cfs_period_us", strconv.Itoa(CPUPeriod)); err != nil {
			return err
		}
		if err := m.write(dir, "cpu.cfs_quota_us", strconv.FormatInt(l.CPUQuota, 10)); err != nil {
			return err
		}
	}
	if l.MemoryBytes > 0 {
		return m.write(filepath.Join(m.mount, "memory", parent), "memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10))
	}
	return nil
}

// ensureV2: each level enables the cpu, memory and pids controllers for
// the one below; weights are the shares converted as runc converts them.
func (m *Manager) ensureV2(parent string, l Limits) error {
	dir := m.mount
	for _, part := range splitPath(parent) {
		if err := m.write(dir, "cgroup.subtree_control", "+cpu +memory +pids"); err != nil {
			return err
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("pod cgroup %s: %w", parent, err)
		}
	}
	if err := m.write(filepath.Join(m.mount, Root, "besteffort"), "cpu.weight", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err // absent until a BestEffort pod made it
	}
	if err := m.write(dir, "cpu.weight", strconv.FormatUint(weight(l.CPUShares), 10)); err != nil {
		return err
	}
	if l.CPUQuota > 0 {
		if err := m.write(dir, "cpu.max", fmt.Sprintf("%d %d", l.CPUQuota, CPUPeriod)); err != nil {
			return err
		}
	}
	if l.MemoryBytes > 0 {
		return m.write(dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10))
	}
	return nil
}

// weight is cgroup v1 shares as a v2 cpu.weight (runc's conversion).
func weight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	return 1 + ((shares-2)*9999)/262142
}

// Remove deletes the pod's cgroup once nothing is left in it (the
// runtime removed its containers'); a cgroup still busy is an error.
func (m *Manager) Remove(parent string) error {
	dirs := []string{filepath.Join(m.mount, parent)}
	if !m.v2 {
		dirs = dirs[:0]
		for _, h := range v1Hierarchies {
			dirs = append(dirs, filepath.Join(m.mount, h, parent))
		}
	}
	var errs []error
	for _, d := range dirs {
		if err := removeTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeTree removes a cgroup and the empty cgroups below it, deepest
// first (a cgroup directory is removed with rmdir, never its files).
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// Processes is the number of tasks in the pod's cgroup (pids.current):
// what a runtime without a per-container count (CRI) cannot say.
func (m *Manager) Processes(parent string) (int64, error) {
	dir := filepath.Join(m.mount, parent)
	if !m.v2 {
		dir = filepath.Join(m.mount, "pids", parent)
	}
	b, err := os.ReadFile(filepath.Join(dir, "pids.current"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func (m *Manager) write(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("pod cgroup: write %s to %s: %w", value, filepath.Join(dir, file), err)
	}
	return nil
}

func splitPath(p string) []string {
	var out []string
	for _, part := range strings.Split(p, "/") {
		if part != "" {
			out = append(out, part)
		}
	}
	return out
}
