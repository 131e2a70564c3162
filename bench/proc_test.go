package bench

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// pids lists the processes in /proc.
func pids() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// cpuTime is utime+stime of pid.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: fields are counted after its ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// cpuOver watches pid for about window: the CPU it used as a percentage of
// one core, its CPU time at the end, and the window as measured.
func cpuOver(b *testing.B, pid int, window time.Duration) (pct float64, total, measured time.Duration) {
	b.Helper()
	cpu0, err := cpuTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(window)
	total, _ = cpuTime(pid)
	measured = time.Since(t0)
	return 100 * (total - cpu0).Seconds() / measured.Seconds(), total, measured
}

// statusKB reads a "kB" line (VmRSS, VmHWM) of /proc/<pid>/status.
func statusKB(pid int, key string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, key)
}

// memKB is one process's resident memory: VmRSS counts the binary's pages
// every podvisor process shares (RssFile), so sums of it overstate; RssAnon
// is the process's own, Pss its proportional share of everything.
type memKB struct{ rss, anon, file, pss int64 }

// shimSet is what the shims of one data dir hold and have used.
type shimSet struct {
	count int
	mem   memKB
	cpu   time.Duration // utime+stime over their lives
}

func (m *memKB) add(o memKB) {
	m.rss += o.rss
	m.anon += o.anon
	m.file += o.file
	m.pss += o.pss
}

func memOf(pid int) (memKB, error) {
	var m memKB
	var err error
	if m.rss, err = statusKB(pid, "VmRSS"); err != nil {
		return m, err
	}
	m.anon, _ = statusKB(pid, "RssAnon")
	m.file, _ = statusKB(pid, "RssFile")
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Pss:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					m.pss, _ = strconv.ParseInt(f[0], 10, 64)
				}
			}
		}
	}
	return m, nil
}

// shims finds the `podvisor __shim` processes of one data dir and sums their
// memory and CPU time.
func shims(dataDir string) (set shimSet) {
	for _, pid := range pids() {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmdline, []byte("\x00__shim")) || !bytes.Contains(cmdline, []byte(dataDir)) {
			continue
		}
		set.addProcess(pid)
	}
	return set
}

// addProcess counts pid in the set, unless it is gone.
func (s *shimSet) addProcess(pid int) {
	if m, err := memOf(pid); err == nil {
		s.count++
		s.mem.add(m)
		cpu, _ := cpuTime(pid)
		s.cpu += cpu
	}
}

// dist summarises durations.
type dist struct{ d []time.Duration }

func newDist(ds []time.Duration) dist {
	s := slices.Clone(ds)
	slices.Sort(s)
	return dist{s}
}

// q is the nearest-rank quantile.
func (d dist) q(p float64) time.Duration {
	if len(d.d) == 0 {
		return 0
	}
	i := int(p*float64(len(d.d))+0.999999) - 1
	return d.d[min(max(i, 0), len(d.d)-1)]
}

func (d dist) min() time.Duration { return d.q(0) }
func (d dist) max() time.Duration { return d.q(1) }

// ms is a duration in milliseconds, for b.ReportMetric.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// round keeps tables readable.
func round(d time.Duration) time.Duration {
	switch {
	case d < 0 && -d < time.Second, d >= 0 && d < time.Second:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(time.Millisecond)
	}
}

func mib(kb int64) float64 { return float64(kb) / 1024 }
