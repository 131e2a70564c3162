package containerd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/cio"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerProcesses are the processes in the cgroup of container id of a
// pod made by runPod (cgroup parent /podvisor-test), on cgroup v2 or v1.
func containerProcesses(id string) []int {
	dirs := []string{filepath.Join("/sys/fs/cgroup/podvisor-test", id), filepath.Join("/sys/fs/cgroup/pids/podvisor-test", id)}
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func commandOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// Issue 25 (k4-397): podvisor, and with it its containerd, killed between
// the CRI's NewTask and the task's start leaves a task created but not
// started. The next containerd deletes that task, and with it the FIFOs the
// container's IO still names, so the next StartContainer fails once runc
// has made the container: the container is exited (StartError), which is
// fine, but containerd's shim left its `runc init` waiting in the
// container's cgroup, for good, past the container's removal. podvisor's
// shim deletes the runc container of a failed create.
func TestStartAfterARestartThatFoundTheTaskCreatedLeavesNoProcess(t *testing.T) {
	needRoot(t)
	n := startTest(t)
	importBusybox(t, n)
	rs := criRuntime(t, n.p)
	ctx := context.Background()
	pod, podCfg := runPod(t, rs, "startrace")
	id, err := rs.CreateContainer(ctx, pod, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: busyboxRef},
		Command:  []string{"sleep", "1000"},
		LogPath:  "main/0.log",
	}, podCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever the outcome, nothing of the test outlives it.
		for _, pid := range containerProcesses(id) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	// The state a kill between NewTask and Start leaves: the task created
	// (runc init waits in the container's cgroup), the CRI's container
	// created. Made here with containerd's client, as the CRI's
	// StartContainer makes it, so that no kill has to hit a window of a
	// few milliseconds.
	c := connect(t, n)
	cntr, err := c.c.LoadContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cntr.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, io.Discard, io.Discard))); err != nil {
		t.Fatal(err)
	}
	if pids := containerProcesses(id); len(pids) == 0 {
		t.Fatal("no process in the container's cgroup after the task was created")
	}
	c.Close()
	if err := syscall.Kill(n.p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-n.p.Done()
	n.start()
	rs = criRuntime(t, n.p)

	st, err := rs.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetState(); got != runtimeapi.ContainerState_CONTAINER_CREATED {
		t.Fatalf("after the restart the container is %v, want CREATED", got)
	}
	startErr := rs.StartContainer(ctx, id)
	st, err = rs.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("StartContainer after the restart: %v; the container is %v (%s, exit %d)", startErr,
		st.GetStatus().GetState(), st.GetStatus().GetReason(), st.GetStatus().GetExitCode())
	if st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
		return // a containerd that keeps the container's IO: nothing was left
	}
	// A failed start leaves no process in the container's cgroup (the
	// deletion of the runc container is synchronous: no wait needed).
	if pids := containerProcesses(id); len(pids) > 0 {
		var cmds []string
		for _, pid := range pids {
			cmds = append(cmds, strconv.Itoa(pid)+" "+commandOf(pid))
		}
		t.Errorf("the start failed (%v) but processes run in the container's cgroup: %v", startErr, cmds)
	}
	if err := rs.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if pids := containerProcesses(id); len(pids) > 0 {
		t.Errorf("container removed, processes %v still in its cgroup", pids)
	}
}

// A StartContainer its client gives up on while the shim creates the task
// (the agent stopping, a timeout): containerd deletes the task at once, and
// the shim's Create, which goes on, must not leave a task behind that
// nobody knows, its `runc init` waiting for good. runc is slowed down here
// (a wrapper that lingers after `runc create`) so that the client gives up
// during the create, not by luck. (Before, containerd's clean-up cancelled
// the create, killing the wrapper — or a `runc create` midway — and its
// runc init waited for good.)
func TestCancelledStartLeavesNoProcess(t *testing.T) {
	needRoot(t)
	// runc makes the container, then the create lingers: the client
	// gives up while the shim's Create is still under way.
	var arm, inCreate string
	wrapper := runcWrapper(t, func(dir, realRunc string) string {
		arm, inCreate = filepath.Join(dir, "arm"), filepath.Join(dir, "in-create")
		return fmt.Sprintf(`#!/bin/sh
if [ -e %[1]s ]; then
	for a in "$@"; do
		if [ "$a" = create ]; then
			rm -f %[1]s
			%[3]s "$@"; rc=$?
			touch %[2]s; sleep 2; exit $rc
		fi
	done
fi
exec %[3]s "$@"
`, arm, inCreate, realRunc)
	})
	n := startTest(t, func(o *Options) { o.Runc = wrapper })
	importBusybox(t, n)
	rs := criRuntime(t, n.p)
	ctx := context.Background()
	pod, podCfg := runPod(t, rs, "cancelled")
	id, err := rs.CreateContainer(ctx, pod, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: busyboxRef},
		Command:  []string{"sleep", "1000"},
		LogPath:  "main/0.log",
	}, podCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range containerProcesses(id) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := os.WriteFile(arm, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- rs.StartContainer(sctx, id) }()
	waitFile(t, inCreate)
	cancel()
	if err := <-started; err == nil {
		t.Fatal("StartContainer succeeded although its client gave up during runc create")
	}
	st := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	t.Logf("the container after the cancelled start: %s, exit %d: %s", st.Reason, st.ExitCode, st.Message)
	// The task is deleted once the create returns, which drains the IO
	// containerd gave up on first (seconds; its bound is 30 s).
	for deadline := time.Now().Add(2 * time.Minute); len(containerProcesses(id)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			var cmds []string
			for _, pid := range containerProcesses(id) {
				cmds = append(cmds, strconv.Itoa(pid)+" "+commandOf(pid))
			}
			logLinesNaming(t, n.p.Paths().Log, id)
			t.Fatalf("2 minutes after the cancelled start, processes run in the container's cgroup: %v", cmds)
		}
	}
	if err := rs.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// runcWrapper writes a shell script that stands in for runc, in a
// directory of its own (dir, for the files the script and the test share):
// script(dir, realRunc) is its text. It returns the script's path.
func runcWrapper(t *testing.T, script func(dir, realRunc string) string) string {
	t.Helper()
	realRunc, err := findRunc()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "runc")
	if err := os.WriteFile(wrapper, []byte(script(dir, realRunc)), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

// waitFile waits for path to exist.
func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}

// logLinesNaming logs the lines of containerd's log that name id.
func logLinesNaming(t *testing.T, log, id string) {
	b, _ := os.ReadFile(log)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, id) {
			t.Log("containerd: " + l)
		}
	}
}
