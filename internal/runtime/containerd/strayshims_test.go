package containerd

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/host/proctree"
)

func TestStrayShims(t *testing.T) {
	const mine, other = "/run/podvisor/containerd-aaaa/containerd.sock", "/run/podvisor/containerd-bbbb/containerd.sock"
	shim := func(pid int, id, address string, extra ...string) proctree.Process {
		args := append([]string{"/usr/local/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", id, "-address", address}, extra...)
		return proctree.Process{PID: pid, PPID: 1, Args: args}
	}
	table := proctree.Table{Self: 2, Procs: []proctree.Process{
		{PID: 1, Args: []string{"/sbin/init"}},
		shim(10, "known", mine),
		shim(11, "lost", mine),
		{PID: 12, PPID: 11, Args: []string{"/pause"}},
		shim(20, "lost", other), // another data dir's containerd: not ours to touch
		{PID: 30, PPID: 1, Args: []string{"/usr/local/bin/containerd-shim-runc-v2", "-namespace=k8s.io", "--id=lost2", "-address=" + mine}},
		{PID: 40, PPID: 1, Args: []string{"/usr/local/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", "x", "-address", mine}},
		{PID: 50, PPID: 1, Args: []string{"/usr/bin/tail", "-id", "lost", "-address", mine}},                                          // not a shim
		{PID: 60, PPID: 1, Args: []string{"/usr/local/bin/containerd-shim-runc-v2", "-address", mine}},                                // no -id, no namespace
		{PID: 70, PPID: 1, Args: []string{"/usr/local/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", mine, "-id"}}, // no id: not one to judge
	}}
	known := func(id string) bool { return id == "known" }
	got := StrayShims(table, mine, known)
	want := []Shim{{PID: 11, ID: "lost"}, {PID: 30, ID: "lost2"}}
	if !slices.Equal(got, want) {
		t.Errorf("StrayShims = %+v, want %+v", got, want)
	}
	if got := StrayShims(table, mine, func(string) bool { return true }); len(got) != 0 {
		t.Errorf("every task known, yet stray shims %+v", got)
	}
}

func TestFlagValue(t *testing.T) {
	tests := []struct {
		args []string
		name string
		want string
	}{
		{[]string{"shim", "-id", "a", "-address", "s"}, "id", "a"},
		{[]string{"shim", "--id", "a"}, "id", "a"},
		{[]string{"shim", "-id=a"}, "id", "a"},
		{[]string{"shim", "-id"}, "id", ""},
		{[]string{"shim", "-idx", "a"}, "id", ""},
		{[]string{"-id", "a"}, "id", ""}, // args[0] is the program
		{[]string{"shim", "x-id", "a"}, "id", ""},
	}
	for _, tc := range tests {
		if got := flagValue(tc.args, tc.name); got != tc.want {
			t.Errorf("flagValue(%q, %q) = %q, want %q", tc.args, tc.name, got, tc.want)
		}
	}
}

// A shim of this containerd that it does not know (as one a crash left
// while its sandbox was being made) is killed at the next start, with what
// runs under it; the shims containerd re-adopts and their containers are
// left alone.
func TestStartKillsStrayShims(t *testing.T) {
	needRoot(t)
	n := startTest(t)
	importBusybox(t, n)
	rs := criRuntime(t, n.p)
	pod, podCfg := runPod(t, rs, "stray")
	id := createStart(t, rs, pod, podCfg, "sleeper", "sleep", "1000")
	before := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_RUNNING)
	n.stop()

	paths, err := PathsFor(n.o.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	// A shell playing a shim of this containerd, a sleep under it playing its pause.
	fake := exec.Command("/bin/sh", "-c", "sleep 600 & wait", "sh",
		"-namespace", Namespace, "-id", strings.Repeat("ab", 32), "-address", paths.Socket)
	fake.Args[0] = filepath.Join(t.TempDir(), ShimBinary)
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- fake.Wait() }()
	t.Cleanup(func() { _ = fake.Process.Kill() })
	var child int
	for deadline := time.Now().Add(30 * time.Second); child == 0; {
		for _, p := range proctree.Read().Procs {
			if p.PPID == fake.Process.Pid {
				child = p.PID
			}
		}
		if child == 0 && time.Now().After(deadline) {
			t.Fatal("the fake shim's child never started")
		}
		time.Sleep(20 * time.Millisecond)
	}

	n.start()
	select {
	case <-exited:
		if ws, ok := fake.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the stray shim ended with %v, want killed by SIGKILL", fake.ProcessState)
		}
	case <-time.After(time.Minute):
		t.Fatal("the stray shim still runs after containerd started")
	}
	for deadline := time.Now().Add(time.Minute); proctree.Alive(child); {
		if time.Now().After(deadline) {
			t.Fatalf("the process %d under the stray shim still runs", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rs = criRuntime(t, n.p)
	if after := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_RUNNING); after.StartedAt != before.StartedAt {
		t.Errorf("the adopted container was restarted")
	}
	if out, _, err := rs.ExecSync(context.Background(), id, []string{"echo", "adopted"}, 10*time.Second); err != nil || string(out) != "adopted\n" {
		t.Errorf("ExecSync in the adopted container = %q, %v: its shim was harmed", out, err)
	}
}
