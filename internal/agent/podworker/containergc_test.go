package podworker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/podvisor/podvisor/internal/agent/containergc"
	"github.com/podvisor/podvisor/internal/runtime"
)

// A round of container GC removes, through the runtime, the older dead
// instances of a pod's container with their logs and forgets them in the
// worker, and everything dead of a pod the node does not have, sandbox
// included; the running instance and the newest dead one stay.
func TestCollectContainersRemovesOlderDeadInstancesAndGonePods(t *testing.T) {
	rt := newFakeRuntime()
	podsDir := t.TempDir()
	pod := testPod("crasher")
	logDir := filepath.Join(podsDir, podDirName(pod), "c")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour)
	for i, state := range []runtime.State{runtime.StateExited, runtime.StateExited, runtime.StateRunning} {
		id := "c-" + string(rune('0'+i))
		logPath := filepath.Join(logDir, string(rune('0'+i))+".log")
		for _, f := range []string{logPath, logPath + ".20260101-000000.gz"} {
			if err := os.WriteFile(f, []byte("x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		rt.byID[id] = runtime.Status{ID: id, SandboxID: "sb-1", PodUID: string(pod.UID), PodNamespace: "ns", PodName: "crasher",
			Name: "c", Attempt: int32(i), State: state, CreatedAt: t0.Add(time.Duration(i) * time.Minute), LogPath: logPath}
	}
	rt.sandboxes["sb-1"] = runtime.SandboxStatus{ID: "sb-1", PodUID: string(pod.UID), State: runtime.SandboxReady, CreatedAt: t0}

	m, err := New(Config{NodeName: "n", PodsDir: podsDir, Runtime: setOf(rt),
		Status: &statusLog{last: map[types.UID]v1.PodStatus{}}, Recorder: record.NewFakeRecorder(100)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	m.UpdatePod(pod) // the worker claims the re-adopted instances
	// A pod the node has no worker for (its end went wrong): an exited
	// instance in a dead sandbox.
	rt.mu.Lock()
	rt.byID["gone-1"] = runtime.Status{ID: "gone-1", SandboxID: "sb-gone", PodUID: "uid-gone", Name: "c", State: runtime.StateExited, CreatedAt: t0}
	rt.sandboxes["sb-gone"] = runtime.SandboxStatus{ID: "sb-gone", PodUID: "uid-gone", State: runtime.SandboxNotReady, CreatedAt: t0}
	rt.mu.Unlock()

	if err := m.CollectContainers(ctx, containergc.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	var ids, sandboxes []string
	for id := range rt.byID {
		ids = append(ids, id)
	}
	for id := range rt.sandboxes {
		sandboxes = append(sandboxes, id)
	}
	rt.mu.Unlock()
	slices.Sort(ids)
	if want := []string{"c-1", "c-2"}; !slices.Equal(ids, want) || !slices.Equal(sandboxes, []string{"sb-1"}) {
		t.Errorf("runtime has %v and sandboxes %v; want %v and [sb-1]", ids, sandboxes, want)
	}
	entries, _ := os.ReadDir(logDir)
	var logs []string
	for _, e := range entries {
		logs = append(logs, e.Name())
	}
	if want := []string{"1.log", "1.log.20260101-000000.gz", "2.log", "2.log.20260101-000000.gz"}; !slices.Equal(logs, want) {
		t.Errorf("logs %v, want %v", logs, want)
	}
	w := m.worker(pod.UID)
	w.mu.Lock()
	var records []string
	for _, s := range w.instancesOf("c") {
		records = append(records, s.ID)
	}
	w.mu.Unlock()
	if want := []string{"c-1", "c-2"}; !slices.Equal(records, want) {
		t.Errorf("worker's records %v, want %v", records, want)
	}
}

// logs --previous reads the instance the status shows as lastState, as
// upstream: during a back-off the newest (the one the GC keeps), once a
// new instance runs the one before it; without a lastState, the one
// before the newest.
func TestPreviousLogIsTheLastStateInstance(t *testing.T) {
	list := []runtime.Status{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	w := &worker{m: &Manager{runtimeName: "containerd"}}
	for _, tc := range []struct {
		name string
		last string
		want int
	}{
		{"back-off: lastState is the newest", "containerd://c", 2},
		{"running: lastState is the one before", "containerd://b", 1},
		{"no lastState", "", 1},
	} {
		w.lastStatus = v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "other"}, {Name: "app"}}}
		if tc.last != "" {
			w.lastStatus.ContainerStatuses[1].LastTerminationState.Terminated = &v1.ContainerStateTerminated{ContainerID: tc.last}
		}
		if got := w.previousLocked("app", list); got != tc.want {
			t.Errorf("%s: index %d, want %d", tc.name, got, tc.want)
		}
	}
}
