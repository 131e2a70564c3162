package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/containerd"
)

// An exit heard from containerd before the CRI reports it: the container is
// exited at once, with that status and time, and the CRI's own report
// takes over when it comes.
func TestAnEarlyExitIsReportedBeforeTheCRIs(t *testing.T) {
	r, f := fakeRuntime(t, time.Hour)
	id := fakeContainer(t, r)
	at := time.Now().Add(-time.Millisecond).Round(0)
	r.ObserveTaskExit(id, 3, at)
	ev := waitEvent(t, r, id, runtime.StateExited, 5*time.Second)
	if ev.PodUID != "u1" || ev.Name != "c" {
		t.Errorf("event %+v does not name the container", ev)
	}
	st, err := r.Status(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateExited || st.ExitCode != 3 || !st.FinishedAt.Equal(at) || st.Reason != "" {
		t.Errorf("status %+v while the CRI still says running, want exited 3 at %v", st, at)
	}
	// The CRI's own event of the exit announces it once more, so that the
	// agent reads the CRI's final status (and the log's tail).
	exitInFake(f, id)
	f.events <- &runtimeapi.ContainerEventResponse{ContainerId: id,
		ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
		PodSandboxStatus:   &runtimeapi.PodSandboxStatus{Id: "sandbox"}}
	waitEvent(t, r, id, runtime.StateExited, 5*time.Second)
	// The CRI reports the exit: its status is the one.
	if st, _ := r.Status(context.Background(), id); st.State != runtime.StateExited || st.FinishedAt.Equal(at) {
		t.Errorf("status %+v, want the CRI's", st)
	}
	r.mu.Lock()
	left := len(r.early)
	r.mu.Unlock()
	if left != 0 {
		t.Errorf("%d early exits kept after the CRI reported them", left)
	}
}

// An early exit outlives the agent: containerd killed before it handled
// the exit reports it lost (255, "Unknown") after its restart, and the
// next agent reports the exit it heard, not the loss. The record goes once
// the container does.
func TestAnEarlyExitSurvivesARestartAndALostExit(t *testing.T) {
	r, f := fakeRuntime(t, time.Hour)
	stateDir := r.cfg.StateDir
	id := fakeContainer(t, r)
	at := time.Now().Add(-time.Second).Round(0)
	r.ObserveTaskExit(id, 2, at)
	waitEvent(t, r, id, runtime.StateExited, 5*time.Second)
	r.Close()

	f.mu.Lock()
	c := f.containers[id]
	c.State, c.ExitCode, c.Reason, c.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, lostExitCode, lostExitReason, time.Now().UnixNano()
	f.mu.Unlock()
	r2 := connectFake(t, f, time.Hour, stateDir)
	st, err := r2.Status(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateExited || st.ExitCode != 2 || st.Reason != "" || !st.FinishedAt.Equal(at) {
		t.Errorf("after a restart with the exit lost: %+v, want exited 2 at %v", st, at)
	}
	// It stays so while the CRI says the exit is lost.
	if st, _ := r2.Status(context.Background(), id); st.ExitCode != 2 {
		t.Errorf("read again: %+v, want exit 2", st)
	}
	if err := r2.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Join(stateDir, "exits")); len(left) != 0 {
		t.Errorf("early exits kept after the container was removed: %v", left)
	}
}

// An early exit the CRI then reports itself is forgotten, on disk too; one
// of a container removed behind the runtime's back goes at the next relist.
func TestEarlyExitRecordsGoWhenNoLongerNeeded(t *testing.T) {
	r, f := fakeRuntime(t, 50*time.Millisecond)
	dir := filepath.Join(r.cfg.StateDir, "exits")
	reported, removed := fakeContainer(t, r), fakeContainer(t, r)
	for _, id := range []string{reported, removed} {
		r.ObserveTaskExit(id, 3, time.Now())
		waitEvent(t, r, id, runtime.StateExited, 5*time.Second)
	}
	if left, _ := os.ReadDir(dir); len(left) != 2 {
		t.Fatalf("%d early exits on disk, want 2", len(left))
	}
	exitInFake(f, reported)
	if st, _ := r.Status(context.Background(), reported); st.ExitCode != 3 || st.FinishedAt.IsZero() {
		t.Fatalf("status %+v, want the CRI's exit 3", st)
	}
	f.mu.Lock()
	delete(f.containers, removed)
	f.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left, _ := os.ReadDir(dir)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("early exits still on disk: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SIGKILL's status may be an OOM kill, which containerd tells only once it
// handled the exit; so is an unknown container (an exec, a sandbox) ignored.
func TestEarlyExitsLeaveKillsAndStrangersToTheCRI(t *testing.T) {
	r, _ := fakeRuntime(t, time.Hour)
	id := fakeContainer(t, r)
	r.ObserveTaskExit(id, 137, time.Now())
	r.ObserveTaskExit("sandbox-or-exec", 0, time.Now())
	select {
	case ev := <-r.Events():
		t.Errorf("unexpected event %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
	if st, _ := r.Status(context.Background(), id); st.State != runtime.StateRunning {
		t.Errorf("status %+v, want running until the CRI says otherwise", st)
	}
}

// A container being stopped or deleted is SIGKILLed once its grace period
// is over: that exit (137) is not reported early (it may be an OOM kill),
// but it is kept, so that containerd killed before it handled the exit does
// not make it 255 "Unknown" after a restart. The CRI's own report of the
// kill (OOMKilled here) is the one whenever the CRI has it.
func TestAKilledContainersExitSurvivesARestartAndALostExit(t *testing.T) {
	r, f := fakeRuntime(t, time.Hour)
	stateDir := r.cfg.StateDir
	lost, reported := fakeContainer(t, r), fakeContainer(t, r)
	at := time.Now().Add(-time.Second).Round(0)
	for _, id := range []string{lost, reported} {
		r.ObserveTaskExit(id, 137, at)
	}
	if left, _ := os.ReadDir(filepath.Join(stateDir, "exits")); len(left) != 2 {
		t.Fatalf("%d kills kept on disk, want 2", len(left))
	}
	r.Close()

	f.mu.Lock()
	c := f.containers[lost]
	c.State, c.ExitCode, c.Reason, c.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, lostExitCode, lostExitReason, time.Now().UnixNano()
	c = f.containers[reported]
	c.State, c.ExitCode, c.Reason, c.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, 137, "OOMKilled", at.UnixNano()
	f.mu.Unlock()
	r2 := connectFake(t, f, time.Hour, stateDir)
	st, err := r2.Status(context.Background(), lost)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateExited || st.ExitCode != 137 || st.Reason != "" || !st.FinishedAt.Equal(at) {
		t.Errorf("after a restart with the kill lost: %+v, want exited 137 at %v", st, at)
	}
	if st, _ := r2.Status(context.Background(), reported); st.ExitCode != 137 || st.Reason != "OOMKilled" {
		t.Errorf("after a restart with the kill reported: %+v, want the CRI's OOMKilled", st)
	}
	if err := r2.Remove(context.Background(), lost); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Join(stateDir, "exits")); len(left) != 0 {
		t.Errorf("kills kept after the CRI reported one and the other was removed: %v", left)
	}
}

// containerd killed after its CRI deleted a task and before it recorded the
// exit reports the exit lost (255, "Unknown"); the exit podvisor's shim kept
// stands in for it, also where an agent heard a kill first, and only for a
// lost exit.
func TestAnExitKeptOutsideTheCRIStandsInForALostOne(t *testing.T) {
	r, f := fakeRuntime(t, time.Hour)
	stateDir := r.cfg.StateDir
	at := time.Now().Add(-time.Second).Round(0)
	type kase struct {
		name     string
		early    uint32 // an exit the earlier agent heard (0: none)
		kept     bool
		reported bool // the CRI reports the exit itself (3)
		want     int32
		wantAt   bool // FinishedAt is the kept exit's
	}
	cases := []kase{
		{name: "lost, kept", kept: true, want: 1, wantAt: true},
		{name: "lost, nothing kept", want: lostExitCode},
		{name: "reported, kept", kept: true, reported: true, want: 3},
		{name: "lost, a kill heard early, kept", early: 137, kept: true, want: 1, wantAt: true},
	}
	ids := map[string]kase{}
	for _, c := range cases {
		id := fakeContainer(t, r)
		ids[id] = c
		if c.early != 0 {
			r.ObserveTaskExit(id, c.early, at.Add(-time.Hour))
		}
	}
	r.Close()
	f.mu.Lock()
	for id, c := range ids {
		fc := f.containers[id]
		fc.State, fc.ExitCode, fc.Reason, fc.FinishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, lostExitCode, lostExitReason, time.Now().UnixNano()
		if c.reported {
			fc.ExitCode, fc.Reason = 3, "Error"
		}
	}
	f.mu.Unlock()
	r2 := connectFake(t, f, time.Hour, stateDir, func(c *Config) {
		c.ExitKept = func(id string) (uint32, time.Time, bool) {
			if ids[id].kept {
				return 1, at, true
			}
			return 0, time.Time{}, false
		}
	})
	for id, c := range ids {
		st, err := r2.Status(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != runtime.StateExited || st.ExitCode != c.want || (c.wantAt && !st.FinishedAt.Equal(at)) {
			t.Errorf("%s: status %+v, want exited %d", c.name, st, c.want)
		}
	}
}

// On podvisor's containerd, task exits reach the runtime before the CRI's
// own report, with the CRI's status and time.
func TestEarlyExitsFromContainerd(t *testing.T) {
	c := needContainerd(t)
	e, ok := c.daemon.(*embedded)
	if !ok {
		t.Skip("an external containerd: podvisor watches task exits only on its own")
	}
	r, ctx, pod := podFixture(t)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go e.p.WatchTaskExits(watchCtx, func(x containerd.TaskExit) { r.ObserveTaskExit(x.ContainerID, x.ExitStatus, x.ExitedAt) })
	// The first container gives the watch time to subscribe: an exit
	// before that is seen only through the CRI.
	for i := range 6 {
		id := createStart(t, r, pod.container(fmt.Sprintf("early%d", i), "sh", "-c", "sleep 0.3; exit 4"))
		waitEvent(t, r, id, runtime.StateExited, 10*time.Second)
		received := time.Now()
		r.mu.Lock()
		_, early := r.early[id]
		r.mu.Unlock()
		if !early {
			if i > 0 {
				t.Errorf("the exit of %s came through the CRI, not early", id)
			}
			continue
		}
		first, err := r.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if first.State != runtime.StateExited || first.ExitCode != 4 {
			t.Fatalf("status after the exit event %+v, want exited 4", first)
		}
		t.Logf("exit → event: %v", received.Sub(first.FinishedAt))
		// The CRI's report, when it comes, says the same.
		deadline := time.Now().Add(10 * time.Second)
		for {
			r.mu.Lock()
			_, pending := r.early[id]
			r.mu.Unlock()
			if !pending {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the CRI never reported the exit of %s", id)
			}
			time.Sleep(10 * time.Millisecond)
			r.Status(ctx, id)
		}
		cri, err := r.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if cri.ExitCode != first.ExitCode || !cri.FinishedAt.Equal(first.FinishedAt) || cri.Reason != first.Reason {
			t.Errorf("the CRI says %+v, the early exit said %+v", cri, first)
		}
	}
}
