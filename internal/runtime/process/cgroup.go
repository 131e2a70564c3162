package process

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/podvisor/podvisor/internal/runtime"
)

const cgroupRoot = "/sys/fs/cgroup"

// v1Controllers are the v1 hierarchies a container must get a cgroup in:
// pids to find every process, memory to see OOM kills and limit memory.
var v1Controllers = []string{"pids", "memory"}

// v1Optional are v1 hierarchies used when the machine has them: cpu for the
// CPU quota and shares, cpuacct for the CPU time used (a hierarchy of its
// own on some machines, co-mounted with cpu on others).
var v1Optional = []string{"cpu", "cpuacct"}

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
	found := 0
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
			if slices.Contains(v1Controllers, ctrl) {
				dirs = append(dirs, filepath.Join(cgroupRoot, ctrl, parts[2]))
				found++
			} else if slices.Contains(v1Optional, ctrl) {
				if _, err := os.Stat(filepath.Join(cgroupRoot, ctrl)); err == nil {
					dirs = append(dirs, filepath.Join(cgroupRoot, ctrl, parts[2]))
				}
			}
		}
	}
	if found != len(v1Controllers) {
		return nil, fmt.Errorf("cgroup v1 hierarchies %v not all found in /proc/self/cgroup", v1Controllers)
	}
	return dirs, nil
}

// createCgroups makes the container's cgroup below parent (the shim's own,
// from selfCgroups), as parent/podvisor/<id>, so a container stays inside
// whatever confines podvisor, and applies the limits before anything joins.
func createCgroups(parent []string, id string, res runtime.Resources) (cgroupSet, error) {
	var set cgroupSet
	for _, dir := range parent {
		d := filepath.Join(dir, "podvisor", id)
		if err := os.MkdirAll(d, 0o755); err != nil {
			set.remove()
			return cgroupSet{}, fmt.Errorf("create cgroup: %w", err)
		}
		set.Dirs = append(set.Dirs, d)
	}
	if err := set.applyLimits(res); err != nil {
		set.remove()
		return cgroupSet{}, err
	}
	return set, nil
}

// applyLimits writes the container's resource limits into the set, in the
// files of whichever cgroup version the directory belongs to.
func (c cgroupSet) applyLimits(res runtime.Resources) error {
	for _, d := range c.Dirs {
		ws := limitWrites(d, res, len(c.Dirs) == 1 && unified())
		swapFirstWhenGrowing(d, ws)
		for _, w := range ws {
			if err := os.WriteFile(filepath.Join(d, w.file), []byte(w.value), 0); err != nil {
				if w.optional && errors.Is(err, os.ErrNotExist) {
					continue
				}
				return fmt.Errorf("set %s to %s: %w", w.file, w.value, err)
			}
		}
	}
	return nil
}

// swapFirstWhenGrowing puts, in ws, the v1 memory+swap limit before the
// memory limit when the memory limit grows (an in-place resize): the kernel
// refuses a memory limit above the memory+swap one (EINVAL), and a memsw
// limit below the memory one.
func swapFirstWhenGrowing(dir string, ws []cgroupWrite) {
	for i := 0; i+1 < len(ws); i++ {
		if ws[i].file != "memory.limit_in_bytes" || ws[i+1].file != "memory.memsw.limit_in_bytes" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ws[i].file))
		if err != nil {
			return
		}
		cur, err1 := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		next, err2 := strconv.ParseInt(ws[i].value, 10, 64)
		if err1 == nil && err2 == nil && next > cur {
			ws[i], ws[i+1] = ws[i+1], ws[i]
		}
	}
}

type cgroupWrite struct {
	file, value string
	optional    bool // the file may not exist (no swap accounting)
}

// limitWrites is what applyLimits writes into one directory, in order.
func limitWrites(dir string, res runtime.Resources, v2 bool) []cgroupWrite {
	var out []cgroupWrite
	if v2 {
		if res.MemoryLimitBytes > 0 {
			out = append(out,
				cgroupWrite{file: "memory.max", value: strconv.FormatInt(res.MemoryLimitBytes, 10)},
				// No swap, as the kubelet's default NoSwap behaviour: the limit is the limit.
				cgroupWrite{file: "memory.swap.max", value: "0", optional: true})
		}
		if res.CPUQuotaMicros > 0 {
			out = append(out, cgroupWrite{file: "cpu.max", value: fmt.Sprintf("%d %d", res.CPUQuotaMicros, period(res))})
		}
		if res.CPUShares > 0 {
			out = append(out, cgroupWrite{file: "cpu.weight", value: strconv.FormatUint(sharesToWeight(res.CPUShares), 10)})
		}
		return out
	}
	switch v1Hierarchy(dir) {
	case "memory":
		if res.MemoryLimitBytes > 0 {
			v := strconv.FormatInt(res.MemoryLimitBytes, 10)
			out = append(out,
				cgroupWrite{file: "memory.limit_in_bytes", value: v},
				cgroupWrite{file: "memory.memsw.limit_in_bytes", value: v, optional: true})
		}
	case "cpu":
		if res.CPUQuotaMicros > 0 {
			out = append(out,
				cgroupWrite{file: "cpu.cfs_period_us", value: strconv.FormatInt(period(res), 10)},
				cgroupWrite{file: "cpu.cfs_quota_us", value: strconv.FormatInt(res.CPUQuotaMicros, 10)})
		}
		if res.CPUShares > 0 {
			out = append(out, cgroupWrite{file: "cpu.shares", value: strconv.FormatUint(res.CPUShares, 10)})
		}
	}
	return out
}

// v1Hierarchy names the v1 hierarchy a cgroup directory belongs to.
func v1Hierarchy(dir string) string {
	rel, err := filepath.Rel(cgroupRoot, dir)
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	return first
}

func period(res runtime.Resources) int64 {
	if res.CPUPeriodMicros > 0 {
		return res.CPUPeriodMicros
	}
	return 100000
}

// sharesToWeight maps cpu.shares [2, 262144] onto cpu.weight [1, 10000], as runc.
func sharesToWeight(shares uint64) uint64 {
	shares = min(max(shares, 2), 262144)
	return 1 + ((shares-2)*9999)/262142
}

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
