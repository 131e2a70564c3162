package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// procStat is what podvisor needs of /proc/<pid>/stat.
type procStat struct {
	State     byte   // R, S, D, Z, ...
	Ppid      int    // field 4
	Pgid      int    // field 5
	StartTime uint64 // field 22, clock ticks since boot: with the pid, names a process uniquely
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// parseProcStat parses a stat line; comm (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed /proc stat")
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return procStat{}, errors.New("short /proc stat")
	}
	var s procStat
	s.State = f[0][0]
	var err error
	if s.Ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return procStat{}, fmt.Errorf("/proc stat ppid: %w", err)
	}
	if s.Pgid, err = strconv.Atoi(string(f[2])); err != nil {
		return procStat{}, fmt.Errorf("/proc stat pgrp: %w", err)
	}
	if s.StartTime, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return procStat{}, fmt.Errorf("/proc stat starttime: %w", err)
	}
	return s, nil
}

// descendants returns every live process below pid, found through parent
// links in /proc. Under a shim that is a child subreaper this is every
// process the container made, setsid or not.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := readProcStat(p)
		if err != nil || s.State == 'Z' {
			continue
		}
		children[s.Ppid] = append(children[s.Ppid], p)
	}
	var out []int
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// signalGroup signals the process group pgid; a group that is gone is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return nil
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal process group %d: %w", pgid, err)
	}
	return nil
}

func signalAll(pids []int, sig syscall.Signal) {
	for _, p := range pids {
		if p > 1 {
			syscall.Kill(p, sig) //nolint:errcheck // it may have exited meanwhile
		}
	}
}
