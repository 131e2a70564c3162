// Package proctree reads the host's process table and kills process trees:
// what podvisor's runtimes leave running (a shim, the containers under it)
// when no runtime will stop it. Selection is over a Table, so that it can
// be decided and tested apart from /proc.
package proctree

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Process is one entry of the process table.
type Process struct {
	PID, PPID int
	Args      []string // the command line; empty for kernel threads
}

// Cmdline is the command line, its arguments joined by spaces.
func (p Process) Cmdline() string { return strings.Join(p.Args, " ") }

// Table is the host's processes as read at one moment, and the reader's pid.
type Table struct {
	Self  int
	Procs []Process
}

// Read reads the process table from /proc; a process that exits meanwhile
// is left out or kept without its command line.
func Read() Table {
	t := Table{Self: os.Getpid()}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p := Process{PID: pid}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces and parentheses:
		// the fields follow the last ')'.
		if i := strings.LastIndexByte(string(st), ')'); i > 0 {
			if f := strings.Fields(string(st[i+1:])); len(f) > 1 {
				p.PPID, _ = strconv.Atoi(f[1])
			}
		}
		if cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && len(cmd) > 0 {
			p.Args = strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		}
		t.Procs = append(t.Procs, p)
	}
	return t
}

// Trees returns the pids of the processes root selects and of every
// process below one, each once. Never the reader or one of its ancestors
// (a sudo or shell whose command line matches): those are not selected, but
// what is below a selected one still is.
func (t Table) Trees(root func(Process) bool) []int {
	parent := make(map[int]int, len(t.Procs))
	roots := map[int]bool{}
	for _, p := range t.Procs {
		parent[p.PID] = p.PPID
		if root(p) {
			roots[p.PID] = true
		}
	}
	for p, hops := t.Self, 0; p > 1 && hops <= len(t.Procs); p, hops = parent[p], hops+1 {
		delete(roots, p)
	}
	var out []int
	for _, proc := range t.Procs {
		for p, hops := proc.PID, 0; p > 1 && hops <= len(t.Procs); p, hops = parent[p], hops+1 {
			if roots[p] {
				out = append(out, proc.PID)
				break
			}
		}
	}
	return out
}

// Kill SIGKILLs pids and returns how many it killed. A tree is killed
// whole at once: a container may have left its shim's process group.
func Kill(pids []int) int {
	killed := 0
	for _, pid := range pids {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}

// Alive: process pid exists and is not a zombie (a zombie has ended; only
// its exit status waits for its parent).
func Alive(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(st), ')')
	return i > 0 && len(st) > i+2 && st[i+2] != 'Z'
}
