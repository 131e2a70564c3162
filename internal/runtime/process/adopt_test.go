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
	if err := b.Stop(stopCtx(t), id, 10*time.Second); err != nil {
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

// An instance created by an agent that died before starting it: a stop
// records it exited (it never ran) and it can never start afterwards.
func TestStopOfAnInstanceNeverStartedRecordsItExited(t *testing.T) {
	root := t.TempDir()
	a := newRuntime(t, root)
	id, err := a.Create(context.Background(), testSpec(t, "sleep", "30"))
	if err != nil {
		t.Fatal(err)
	}
	a.Close()

	b := newRuntime(t, root)
	if st := status(t, b, id); st.State != runtime.StateCreated {
		t.Fatalf("state %s after restart, want created", st.State)
	}
	if err := b.Stop(stopCtx(t), id, time.Second); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, b, id, runtime.StateExited)
	if st := status(t, b, id); st.State != runtime.StateExited || st.ExitCode != 137 {
		t.Fatalf("state %s exit %d, want exited 137", st.State, st.ExitCode)
	}
	if err := b.Start(context.Background(), id); err == nil {
		t.Fatal("an instance stopped before it started was started")
	}
}

// The agent died after spawning the shim but before the shim recorded the
// start: the next agent announces the start once the shim records it.
func TestStartRecordedAfterTheAgentDiedIsAnnounced(t *testing.T) {
	root := t.TempDir()
	a := newRuntime(t, root)
	id := run(t, a, testSpec(t, "sleep", "30"))
	a.Close()
	// Make the record look as it does in the instant between spawn and start.
	d := instanceDir(filepath.Join(root, id))
	st, err := d.readState()
	if err != nil {
		t.Fatal(err)
	}
	created := st
	created.State = runtime.StateCreated.String()
	if err := d.writeState(created); err != nil {
		t.Fatal(err)
	}
	b := newRuntime(t, root)
	if err := d.writeState(st); err != nil { // the shim records the start
		t.Fatal(err)
	}
	waitEvent(t, b, id, runtime.StateRunning)
	if err := b.Stop(stopCtx(t), id, 0); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, b, id, runtime.StateExited)
}
