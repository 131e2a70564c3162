package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// exitOnUSR1 is a container that exits 7 on SIGUSR1 and only notes a
// SIGTERM (a stop under way), so that the test decides when it exits.
const exitOnUSR1 = `trap 'echo stopping' TERM; trap 'exit 7' USR1; echo ready; while :; do sleep 0.05; done`

// Issue 25 (k1-97): a container that exits around a SIGKILL of containerd
// (podvisor's containerd dies with `podvisor up`) keeps its exit code: the
// CRI, once containerd runs again, reports the real exit, not 255/Unknown.
// The container's exit is made by the test, at a point of the kill's
// sequence it chooses, so that no timing decides what is tested.
func TestExitAroundAContainerdKillIsNotLost(t *testing.T) {
	needRoot(t)
	// runc, but for the `runc delete` of an armed container: once runc has
	// deleted it, containerd is stopped (SIGSTOP), in the middle of its
	// handling of the exit, before the CRI has recorded it.
	var arm string
	wrapper := runcWrapper(t, func(dir, realRunc string) string {
		arm = filepath.Join(dir, "arm")
		return fmt.Sprintf(`#!/bin/sh
if [ -s %[1]s ]; then
	read id pid < %[1]s
	del=; hit=
	for a in "$@"; do
		[ "$a" = delete ] && del=1
		[ "$a" = "$id" ] && hit=1
	done
	if [ -n "$del" ] && [ -n "$hit" ]; then
		%[2]s "$@"; rc=$?
		rm -f %[1]s
		kill -STOP "$pid"
		exit $rc
	fi
fi
exec %[2]s "$@"
`, arm, realRunc)
	})
	n := startTest(t, func(o *Options) { o.Runc = wrapper })
	importBusybox(t, n)
	pod, podCfg := runPod(t, criRuntime(t, n.p), "exitrace")
	for i, tc := range []struct {
		name string
		// kill kills containerd and makes the container exit (c.exit),
		// in the order the case is about.
		kill func(t *testing.T, c exitCase)
	}{
		{"exits while containerd is down", func(t *testing.T, c exitCase) {
			killContainerd(t, n)
			c.exit()
		}},
		{"exit heard by the shim, not by containerd", func(t *testing.T, c exitCase) {
			// Stopped, containerd cannot read the shim's exit.
			if err := syscall.Kill(n.p.Pid(), syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			c.exit()
			killContainerd(t, n)
		}},
		{"exit handled by containerd, not recorded by its CRI", func(t *testing.T, c exitCase) {
			if err := os.WriteFile(arm, fmt.Appendf(nil, "%s %d\n", c.id, n.p.Pid()), 0o644); err != nil {
				t.Fatal(err)
			}
			c.exit()
			// The shim has deleted the task; containerd, stopped, has not
			// recorded the exit.
			waitShimForgets(t, n, pod, c.id)
			killContainerd(t, n)
		}},
		{"exits while being stopped", func(t *testing.T, c exitCase) {
			stopped := make(chan error, 1)
			go func() { stopped <- c.rs.StopContainer(context.Background(), c.id, 120) }()
			waitLogLine(t, c.log, "stopping")
			killContainerd(t, n)
			<-stopped // failed or not, containerd is gone
			c.exit()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := criRuntime(t, n.p)
			name := fmt.Sprintf("c%d", i)
			id := createStart(t, rs, pod, podCfg, name, "sh", "-c", exitOnUSR1)
			log := filepath.Join(podCfg.LogDirectory, name, "0.log")
			waitLogLine(t, log, "ready")
			main := mainProcess(t, id)
			tc.kill(t, exitCase{rs: rs, id: id, log: log, exit: func() {
				if err := syscall.Kill(main, syscall.SIGUSR1); err != nil {
					t.Fatal(err)
				}
				waitReaped(t, main)
			}})
			n.start()
			rs = criRuntime(t, n.p)
			cs := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_EXITED)
			code, from := cs.ExitCode, "the CRI"
			if cs.ExitCode == 255 && cs.Reason == "Unknown" {
				// Lost by the CRI: the exit the shim kept stands in.
				code, from = -1, "the CRI (lost) and the shim (nothing kept)"
				if e, ok := n.p.ExitKept(id); ok {
					code, from = int32(e.ExitStatus), "the shim (lost by the CRI)"
				}
			}
			t.Logf("exit %d, from %s", code, from)
			if code != 7 {
				logLinesNaming(t, n.p.Paths().Log, id)
				t.Errorf("after the restart the container's exit is %d, from %s; want 7", code, from)
			}
			if err := rs.RemoveContainer(context.Background(), id); err != nil {
				t.Error(err)
			}
			if e, ok := n.p.ExitKept(id); ok {
				t.Errorf("the exit kept (%+v) outlived the container's removal", e)
			}
		})
	}
}

// exitCase is a container of TestExitAroundAContainerdKillIsNotLost.
type exitCase struct {
	rs   criapi.RuntimeService
	id   string
	log  string // its CRI log
	exit func() // makes it exit 7, returns once its shim has reaped it
}

// waitShimForgets waits until the shim of pod (which runs the pod's
// containers) no longer has the task id, asking it directly.
func waitShimForgets(t *testing.T, n *testNode, pod, id string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.p.Paths().State, "io.containerd.runtime.v2.task", Namespace, pod, "bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	var bootstrap struct{ Address string }
	if err := json.Unmarshal(b, &bootstrap); err != nil {
		t.Fatal(err)
	}
	conn, err := shim.AnonDialer(bootstrap.Address, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	client := ttrpc.NewClient(conn)
	defer client.Close()
	tasks := taskAPI.NewTTRPCTaskClient(client)
	ctx := namespaces.WithNamespace(context.Background(), Namespace)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		_, err := tasks.State(ctx, &taskAPI.StateRequest{ID: id})
		if errdefs.IsNotFound(errgrpc.ToNative(err)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shim still has task %s: %v", id, err)
		}
	}
}

// killContainerd SIGKILLs n's containerd, as a SIGKILL of podvisor does,
// and waits for it to be gone.
func killContainerd(t *testing.T, n *testNode) {
	t.Helper()
	if err := syscall.Kill(n.p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-n.p.Done()
}

// mainProcess is the PID of container id's main process (the `sh -c`).
func mainProcess(t *testing.T, id string) int {
	t.Helper()
	for _, pid := range containerProcesses(id) {
		if strings.HasPrefix(commandOf(pid), "sh -c") {
			return pid
		}
	}
	t.Fatalf("no main process in the cgroup of %s", id)
	return 0
}

// waitReaped waits until pid is gone, reaped by its shim: the shim has its
// exit status.
func waitReaped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never exited", pid)
		}
	}
}

// waitLogLine waits for a line of the CRI log at path that ends in text.
func waitLogLine(t *testing.T, path, text string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasSuffix(l, " "+text) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never logged %q:\n%s", path, text, b)
		}
	}
}
