package proctree

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestTrees(t *testing.T) {
	// 1 init
	// ├─ 10 shim A ── 11 pause ── 12 app ── 13 child
	// ├─ 20 shim B ── 21 pause
	// ├─ 30 sudo reset A ── 31 podvisor reset A (the reader) ── 32 its child
	// └─ 40 unrelated
	table := Table{Self: 31, Procs: []Process{
		{PID: 1, Args: []string{"/sbin/init"}},
		{PID: 2}, // a kernel thread
		{PID: 10, PPID: 1, Args: []string{"shim", "-address", "A"}},
		{PID: 11, PPID: 10, Args: []string{"/pause"}},
		{PID: 12, PPID: 11, Args: []string{"app"}},
		{PID: 13, PPID: 12, Args: []string{"child"}},
		{PID: 20, PPID: 1, Args: []string{"shim", "-address", "B"}},
		{PID: 21, PPID: 20, Args: []string{"/pause"}},
		{PID: 30, PPID: 1, Args: []string{"sudo", "reset", "A"}},
		{PID: 31, PPID: 30, Args: []string{"podvisor", "reset", "A"}},
		{PID: 32, PPID: 31, Args: []string{"helper"}},
		{PID: 40, PPID: 1, Args: []string{"unrelated"}},
	}}
	tests := []struct {
		name string
		root func(Process) bool
		want []int
	}{
		{"a shim with all below it", func(p Process) bool { return p.Cmdline() == "shim -address A" }, []int{10, 11, 12, 13}},
		{"two shims", func(p Process) bool { return strings.HasPrefix(p.Cmdline(), "shim ") }, []int{10, 11, 12, 13, 20, 21}},
		{"never the reader or its ancestors", func(p Process) bool { return strings.HasSuffix(p.Cmdline(), " A") },
			[]int{10, 11, 12, 13}},
		{"a process in the middle of a tree", func(p Process) bool { return p.PID == 12 }, []int{12, 13}},
		{"nothing", func(Process) bool { return false }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := table.Trees(tc.root)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Trees = %v, want %v", got, tc.want)
			}
		})
	}
}

// A parent loop (pids reused while reading) must not hang Trees.
func TestTreesEndsOnAParentLoop(t *testing.T) {
	table := Table{Self: 99, Procs: []Process{{PID: 5, PPID: 6}, {PID: 6, PPID: 5}, {PID: 7, PPID: 1}}}
	if got := table.Trees(func(p Process) bool { return p.PID == 7 }); !slices.Equal(got, []int{7}) {
		t.Errorf("Trees = %v, want [7]", got)
	}
}

func TestReadFindsThisProcess(t *testing.T) {
	table := Read()
	for _, p := range table.Procs {
		if p.PID == os.Getpid() {
			if p.PPID != os.Getppid() || len(p.Args) == 0 || p.Args[0] != os.Args[0] {
				t.Errorf("this process read as %+v, want parent %d and args %q", p, os.Getppid(), os.Args)
			}
			return
		}
	}
	t.Errorf("this process (%d) not in the table of %d processes", os.Getpid(), len(table.Procs))
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Errorf("this process is not alive")
	}
	if Alive(1 << 30) { // above pid_max
		t.Errorf("a pid that cannot exist is alive")
	}
}
