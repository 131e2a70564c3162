package runtimetest

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// CgroupValue is a script that prints, from inside a container, the value
// of one of its own cgroup files: $1 is the v1 controller, $2 the v1 file,
// $3 the v2 file. A container with its own cgroup mount (a CRI runtime)
// sees its cgroup at the mount's root; a host process finds its path in
// the copy of /proc/self/cgroup its main process left in ./cgroup-path (an
// exec'd process may not have joined the cgroup yet when it looks):
// the container's command starts with RecordCgroup.
const CgroupValue = `c=$1; f1=$2; f2=$3
p=$(grep -E "^[0-9]+:([^:]*,)?$c(,[^:]*)?:" cgroup-path | cut -d: -f3)
if [ -n "$p" ]; then
  for d in /sys/fs/cgroup/$c$p /sys/fs/cgroup/$c; do
    if [ -f $d/$f1 ]; then cat $d/$f1; exit 0; fi
  done
else
  p=$(grep '^0::' cgroup-path | cut -d: -f3)
  for d in /sys/fs/cgroup$p /sys/fs/cgroup; do
    if [ -f $d/$f2 ]; then cat $d/$f2; exit 0; fi
  done
fi
echo "no $c cgroup file" >&2; exit 1`

// RecordCgroup, at the start of a container's script, leaves the copy of
// its cgroup paths CgroupValue reads.
const RecordCgroup = "cat /proc/self/cgroup > cgroup-path"

// readCgroup reads, through Exec, a cgroup value as the container sees it.
func readCgroup(t *testing.T, rt runtime.Set, id, controller, v1File, v2File string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	code, err := rt.Exec.Exec(ctx(t), id, []string{"sh", "-c", CgroupValue, "sh", controller, v1File, v2File}, &out, &errOut, 10*time.Second)
	if err != nil || code != 0 {
		t.Fatalf("reading %s from inside the container: exit %d, %v: %s", v1File, code, err, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// A container's processes get its oom_score_adj; an in-place resize
// changes a running container's cgroup limits without restarting it; a zero field leaves its limit as it is; an exited
// container cannot be resized.
func testUpdateResources(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	spec := p.spec(h, "c", RecordCgroup+"; cat /proc/self/oom_score_adj > oom-score-adj; echo ready; exec sleep 300")
	spec.Resources = runtime.Resources{MemoryLimitBytes: 64 << 20, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000, CPUShares: 512}
	spec.OOMScoreAdj = 875
	id := run(t, rt, spec)
	before := waitState(t, rt, id, runtime.StateRunning)
	waitLog(t, spec.LogPath, "ready")
	limits := rt.Features.Limits
	memory := func() string { return readCgroup(t, rt, id, "memory", "memory.limit_in_bytes", "memory.max") }
	quota := func() string {
		v := readCgroup(t, rt, id, "cpu", "cpu.cfs_quota_us", "cpu.max")
		return strings.Fields(v)[0] // v2: "<quota> <period>"
	}
	if limits {
		if got := memory(); got != "67108864" {
			t.Fatalf("memory limit at creation: %s, want 67108864", got)
		}
		var out bytes.Buffer
		if code, err := rt.Exec.Exec(ctx(t), id, []string{"cat", "oom-score-adj"}, &out, nil, 10*time.Second); err != nil || code != 0 || strings.TrimSpace(out.String()) != "875" {
			t.Errorf("oom_score_adj of the container's process: %q (exit %d, %v), want 875", out.String(), code, err)
		}
	}

	if err := rt.Containers.UpdateResources(ctx(t), id, runtime.Resources{MemoryLimitBytes: 96 << 20, CPUQuotaMicros: 30000, CPUPeriodMicros: 100000, CPUShares: 256}); err != nil {
		t.Fatalf("UpdateResources: %v", err)
	}
	if limits {
		if got := memory(); got != "100663296" {
			t.Errorf("memory limit after the update: %s, want 100663296", got)
		}
		if got := quota(); got != "30000" {
			t.Errorf("CPU quota after the update: %s, want 30000", got)
		}
	}
	if err := rt.Containers.UpdateResources(ctx(t), id, runtime.Resources{CPUShares: 300}); err != nil {
		t.Fatalf("UpdateResources of the CPU shares only: %v", err)
	}
	if limits {
		if got := memory(); got != "100663296" {
			t.Errorf("memory limit after an update that does not set it: %s, want it kept (100663296)", got)
		}
	}
	after := status(t, rt, id)
	if after.State != runtime.StateRunning || !after.StartedAt.Equal(before.StartedAt) {
		t.Errorf("the update restarted the container: %v started %v, was started %v", after.State, after.StartedAt, before.StartedAt)
	}

	if err := rt.Containers.Stop(ctx(t), id, 0); err != nil {
		t.Fatal(err)
	}
	if err := rt.Containers.UpdateResources(ctx(t), id, runtime.Resources{MemoryLimitBytes: 128 << 20}); err == nil {
		t.Errorf("UpdateResources of an exited container succeeded")
	}
	if err := rt.Containers.UpdateResources(ctx(t), "0123456789abcdef0123456789abcdef", runtime.Resources{CPUShares: 2}); !runtime.IsNotFound(err) {
		t.Errorf("UpdateResources of an unknown container: %v, want not found", err)
	}
}
