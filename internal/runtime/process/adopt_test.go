package process

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// The agent restarts: a new runtime on the same root finds the running
// instance, can stop it, and gets its exit event.
func TestNewRuntimeReadoptsRunningShims(t *testing.T) {
	root := t.TempDir()
	a := newRuntime(t, root)
	id := run(t, a, testSpec(t, "sleep", "30"))
	pid := status(t, a, id).Pid
	a.Close() // the agent goes away without stopping anything

	b := newRuntime(t, root)
	list, err := b.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != id || list[0].State != runtime.StateRunning || list[0].Pid != pid {
		t.Fatalf("List after restart: %+v", list)
	}
	if err := b.Stop(stopCtx(t), id, syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, b, id, runtime.StateExited)
	if st := status(t, b, id); st.Signal != int32(syscall.SIGTERM) {
		t.Errorf("signal %d, want SIGTERM", st.Signal)
	}
}

// A re-adopted instance that exits on its own is announced by the new runtime.
func TestReadoptedExitIsAnnounced(t *testing.T) {
	root := t.TempDir()
	a := newRuntime(t, root)
	id := run(t, a, testSpec(t, "sleep", "30"))
	pid := status(t, a, id).Pid
	a.Close()

	b := newRuntime(t, root)
	syscall.Kill(pid, syscall.SIGKILL) // not through the runtime
	waitEvent(t, b, id, runtime.StateExited)
	if st := status(t, b, id); st.Signal != int32(syscall.SIGKILL) || st.ExitCode != 137 {
		t.Errorf("signal %d exit %d, want SIGKILL 137", st.Signal, st.ExitCode)
	}
}

// An exit that happens while no agent runs is recorded by the shim and read
// back by the next agent.
func TestExitWhileNoAgentRunsIsReadBack(t *testing.T) {
	root := t.TempDir()
	a := newRuntime(t, root)
	id := run(t, a, testSpec(t, "sh", "-c", "while [ ! -e go ]; do sleep 0.05; done; exit 7"))
	a.Close()
	os.WriteFile(filepath.Join(root, id, workDir, "go"), nil, 0o644)
	eventually(t, "exit recorded in state.json", func() bool {
		st, err := instanceDir(filepath.Join(root, id)).readState()
		return err == nil && st.state() == runtime.StateExited
	})

	b := newRuntime(t, root)
	st := status(t, b, id)
	if st.State != runtime.StateExited || st.ExitCode != 7 {
		t.Errorf("after restart: %s exit %d, want exited 7", st.State, st.ExitCode)
	}
}

// A recorded shim pid now used by another process is not adopted: the
// instance is recorded lost and what is left of it is killed.
func TestReusedShimPidIsNotAdopted(t *testing.T) {
	root := t.TempDir()
	a := newRuntime(t, root)
	id := run(t, a, testSpec(t, "sleep", "30"))
	pid := status(t, a, id).Pid
	a.Close()
	d := instanceDir(filepath.Join(root, id))
	rec, _, err := d.readShim()
	if err != nil {
		t.Fatal(err)
	}
	rec.StartTime++ // as if the pid now belonged to a younger process
	if err := writeJSON(d.path(shimFile), rec); err != nil {
		t.Fatal(err)
	}

	b := newRuntime(t, root)
	st := status(t, b, id)
	// The message says the shim was lost, unless the real shim, alive in this
	// test, recorded the kill first.
	if st.State != runtime.StateExited || st.ExitCode != 137 {
		t.Errorf("got %s exit %d message %q, want exited 137", st.State, st.ExitCode, st.Message)
	}
	eventually(t, "the container's process killed", func() bool { return !alive(pid) })
	// The real shim is this test's child: reap it once it saw its container die.
	eventually(t, "the shim to exit", func() bool {
		var ws syscall.WaitStatus
		p, _ := syscall.Wait4(rec.Pid, &ws, syscall.WNOHANG, nil)
		return p == rec.Pid
	})
}
