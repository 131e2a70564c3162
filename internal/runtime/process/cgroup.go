package process

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const cgroupRoot = "/sys/fs/cgroup"

// v1Controllers are the v1 hierarchies a container gets a cgroup in: pids to
// find every process, memory to see OOM kills (and, later, to limit).
var v1Controllers = []string{"pids", "memory"}

// cgroupSet is a container's cgroup: one directory per v1 hierarchy, or a
// single v2 directory. The zero value (no directories) means none, and every
// method is then a no-op.
type cgroupSet struct {
	Dirs []string
}

// unified reports whether the machine runs cgroup v2 only.
func unified() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// selfCgroups returns, for each hierarchy podvisor uses, the directory the
// calling process is in.
func selfCgroups() ([]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	v2 := unified()
	var dirs []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if v2 {
			if parts[0] == "0" && parts[1] == "" {
				return []string{filepath.Join(cgroupRoot, parts[2])}, nil
			}
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			for _, want := range v1Controllers {
				if ctrl == want {
					dirs = append(dirs, filepath.Join(cgroupRoot, want, parts[2]))
				}
			}
		}
	}
	if len(dirs) != len(v1Controllers) {
		return nil, fmt.Errorf("cgroup v1 hierarchies %v not all found in /proc/self/cgroup", v1Controllers)
	}
	return dirs, nil
}

// createCgroups makes the container's cgroup below parent (the shim's own,
// from selfCgroups), as parent/podvisor/<id>, so a container stays inside
// whatever confines podvisor.
func createCgroups(parent []string, id string) (cgroupSet, error) {
	var set cgroupSet
	for _, dir := range parent {
		d := filepath.Join(dir, "podvisor", id)
		if err := os.MkdirAll(d, 0o755); err != nil {
			set.remove()
			return cgroupSet{}, fmt.Errorf("create cgroup: %w", err)
		}
		set.Dirs = append(set.Dirs, d)
	}
	if err := set.applyLimits(); err != nil {
		set.remove()
		return cgroupSet{}, err
	}
	return set, nil
}

// applyLimits is where resource limits (memory.limit_in_bytes / memory.max,
// pids.max, cpu) will be written; limits are a later issue.
func (c cgroupSet) applyLimits() error { return nil }

// add moves process pid (all its threads) into every directory of the set.
func (c cgroupSet) add(pid int) error {
	for _, d := range c.Dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", d, err)
		}
	}
	return nil
}

// procs returns the processes in the set, from every hierarchy.
func (c cgroupSet) procs() []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range c.Dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// signal sends sig to every member. For SIGKILL on v2 it uses cgroup.kill,
// which also catches processes forking meanwhile; callers loop until empty.
func (c cgroupSet) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL && len(c.Dirs) == 1 {
		if err := os.WriteFile(filepath.Join(c.Dirs[0], "cgroup.kill"), []byte("1"), 0); err == nil {
			return
		}
	}
	signalAll(c.procs(), sig)
}

// oomKilled reports whether the kernel OOM killer killed a process of the set.
func (c cgroupSet) oomKilled() bool {
	for _, d := range c.Dirs {
		for _, f := range []string{"memory.oom_control", "memory.events"} { // v1, v2
			b, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}
			if n, ok := keyedValue(b, "oom_kill"); ok && n > 0 {
				return true
			}
		}
	}
	return false
}

func keyedValue(b []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == key {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// remove deletes the set's directories; a set that still has processes
// cannot be removed (EBUSY). A directory already gone is not an error.
func (c cgroupSet) remove() error {
	var errs []error
	for _, d := range c.Dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}
