package podworker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Re-adoption after an agent restart (issue 18): an instance is killed as an
// orphan only when the API confirms its pod is gone; a worker starts from the
// re-adopted instances (same ID, same attempt) and never makes a second one.

// countingRuntime records the calls that matter for re-adoption.
type countingRuntime struct {
	*fakeRuntime
	mu      sync.Mutex
	created int
	started []string
	stopped []string
	removed []string
}

func (c *countingRuntime) Create(ctx context.Context, s runtime.ContainerSpec) (string, error) {
	c.mu.Lock()
	c.created++
	c.mu.Unlock()
	return c.fakeRuntime.Create(ctx, s)
}

func (c *countingRuntime) Start(ctx context.Context, id string) error {
	c.mu.Lock()
	c.started = append(c.started, id)
	c.mu.Unlock()
	return c.fakeRuntime.Start(ctx, id)
}

func (c *countingRuntime) Stop(ctx context.Context, id string, grace time.Duration) error {
	c.mu.Lock()
	c.stopped = append(c.stopped, id)
	c.mu.Unlock()
	return c.fakeRuntime.Stop(ctx, id, grace)
}

func (c *countingRuntime) Remove(ctx context.Context, id string) error {
	c.mu.Lock()
	c.removed = append(c.removed, id)
	c.mu.Unlock()
	return c.fakeRuntime.Remove(ctx, id)
}

func (c *countingRuntime) calls() (created int, started, stopped, removed []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created, append([]string(nil), c.started...), append([]string(nil), c.stopped...), append([]string(nil), c.removed...)
}

func adoptedInstance(pod *v1.Pod, id string, attempt int32, state runtime.State) runtime.Status {
	st := runtime.Status{ID: id, PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name,
		Name: "c", Attempt: attempt, State: state, CreatedAt: time.Now().Add(-time.Minute)}
	if state != runtime.StateCreated {
		st.StartedAt = st.CreatedAt.Add(time.Second)
	}
	if state == runtime.StateExited {
		st.FinishedAt, st.ExitCode = st.StartedAt.Add(time.Second), 1
	}
	return st
}

func newAdoptionManager(t *testing.T, rt testRuntime, objects ...k8sruntime.Object) (*Manager, *statusLog, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objects...)
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Status: statuses,
		Recorder: record.NewFakeRecorder(1000), Client: client})
	return m, statuses, client
}

func onNode(pod *v1.Pod) *v1.Pod { pod.Spec.NodeName = "n"; return pod }

func waitStatus(t *testing.T, statuses *statusLog, uid types.UID, what string, cond func(v1.PodStatus) bool) v1.PodStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if st, ok := statuses.get(uid); ok && cond(st) {
			return st
		}
		time.Sleep(5 * time.Millisecond)
	}
	st, _ := statuses.get(uid)
	t.Fatalf("timed out waiting for %s; last status %+v", what, st)
	return st
}

// The race of issue 18: the API still has the pod, but the pod source has
// not delivered it when orphans are cleaned up. The instance must be given to
// a worker, not killed, and no second instance may be made.
func TestCleanupOrphansKeepsInstancesOfPodsTheAPIStillHas(t *testing.T) {
	pod := onNode(testPod("undelivered"))
	rt := &countingRuntime{fakeRuntime: newFakeRuntime()}
	run := adoptedInstance(pod, "run-1", 4, runtime.StateRunning)
	prev := adoptedInstance(pod, "prev-1", 3, runtime.StateExited)
	rt.byID[run.ID], rt.byID[prev.ID] = run, prev
	m, statuses, _ := newAdoptionManager(t, rt, pod)

	if pending := m.CleanupOrphans(context.Background()); pending != 0 {
		t.Fatalf("pending = %d, want 0", pending)
	}
	st := waitStatus(t, statuses, pod.UID, "the re-adopted instance reported running", func(s v1.PodStatus) bool {
		return len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Running != nil
	})
	cs := st.ContainerStatuses[0]
	if cs.ContainerID != "podvisor://run-1" || cs.RestartCount != 4 {
		t.Errorf("container %s restartCount %d, want podvisor://run-1 and 4", cs.ContainerID, cs.RestartCount)
	}
	if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ContainerID != "podvisor://prev-1" {
		t.Errorf("lastState = %+v, want the exit of prev-1", cs.LastTerminationState)
	}
	// The source delivering the pod afterwards must not change anything.
	m.UpdatePod(pod)
	time.Sleep(50 * time.Millisecond) // let a wrong second instance show up, if any
	created, _, stopped, removed := rt.calls()
	if created != 0 || len(stopped) != 0 || len(removed) != 0 {
		t.Errorf("created %d, stopped %v, removed %v: want nothing", created, stopped, removed)
	}
}

// A pod that the API no longer has (or has again under another UID, as a
// recreated pod of the same name) leaves true orphans: killed and removed.
func TestCleanupOrphansKillsInstancesOfPodsTheAPIDoesNotHave(t *testing.T) {
	gone := onNode(testPod("gone"))
	old := onNode(testPod("recreated"))
	recreated := old.DeepCopy()
	recreated.UID = "uid-recreated-2"
	rt := &countingRuntime{fakeRuntime: newFakeRuntime()}
	for _, s := range []runtime.Status{
		adoptedInstance(gone, "gone-1", 0, runtime.StateRunning),
		adoptedInstance(old, "old-1", 0, runtime.StateRunning),
	} {
		rt.byID[s.ID] = s
	}
	m, _, _ := newAdoptionManager(t, rt, recreated)
	if pending := m.CleanupOrphans(context.Background()); pending != 0 {
		t.Fatalf("pending = %d, want 0", pending)
	}
	_, _, stopped, removed := rt.calls()
	if len(stopped) != 2 || len(removed) != 2 {
		t.Errorf("stopped %v, removed %v: want both instances", stopped, removed)
	}
}

// An API that cannot answer confirms nothing: the instances are kept and the
// cleanup reports them pending; once the API answers, they are resolved.
func TestCleanupOrphansKeepsInstancesWhileTheAPICannotAnswer(t *testing.T) {
	pod := onNode(testPod("unknown"))
	rt := &countingRuntime{fakeRuntime: newFakeRuntime()}
	s := adoptedInstance(pod, "u-1", 2, runtime.StateRunning)
	rt.byID[s.ID] = s
	m, statuses, client := newAdoptionManager(t, rt, pod)
	fail := true
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if fail {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	if pending := m.CleanupOrphans(context.Background()); pending != 1 {
		t.Fatalf("pending = %d, want 1", pending)
	}
	if _, _, stopped, removed := rt.calls(); len(stopped) != 0 || len(removed) != 0 {
		t.Fatalf("stopped %v, removed %v while the API could not answer", stopped, removed)
	}
	fail = false
	if pending := m.CleanupOrphans(context.Background()); pending != 0 {
		t.Fatalf("pending = %d after the API answered, want 0", pending)
	}
	waitStatus(t, statuses, pod.UID, "the kept instance running", func(s v1.PodStatus) bool {
		return len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].ContainerID == "podvisor://u-1" && s.ContainerStatuses[0].RestartCount == 2
	})
}

// An instance that exits between the runtime's List and its worker's
// creation: the exit event must reach the worker through the index, or the
// worker would wait for an exit that already happened.
func TestExitOfAnUnclaimedInstanceReachesItsWorker(t *testing.T) {
	pod := onNode(testPod("exits"))
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	rt := &countingRuntime{fakeRuntime: newFakeRuntime()}
	s := adoptedInstance(pod, "e-1", 0, runtime.StateRunning)
	rt.byID[s.ID] = s
	m, statuses, _ := newAdoptionManager(t, rt, pod)

	s.State, s.FinishedAt, s.ExitCode = runtime.StateExited, time.Now(), 3
	rt.fakeRuntime.mu.Lock()
	rt.byID[s.ID] = s
	rt.fakeRuntime.mu.Unlock()
	rt.events <- runtime.Event{ID: s.ID, PodUID: s.PodUID, Name: s.Name, State: runtime.StateExited}
	// The event is routed before the worker exists.
	deadline := time.Now().Add(5 * time.Second)
	for {
		m.mu.Lock()
		var list []runtime.Status
		if a := m.orphans[pod.UID]; a != nil {
			list = a.containers
		}
		done := len(list) == 1 && list[0].State == runtime.StateExited
		m.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the exit did not reach the unclaimed instance")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.UpdatePod(pod)
	waitStatus(t, statuses, pod.UID, "Failed with exit code 3", func(s v1.PodStatus) bool {
		return s.Phase == v1.PodFailed && len(s.ContainerStatuses) == 1 &&
			s.ContainerStatuses[0].State.Terminated != nil && s.ContainerStatuses[0].State.Terminated.ExitCode == 3
	})
}

// An earlier agent created an instance and died before starting it: the
// worker starts that very instance (same ID, same attempt), it does not make
// another one.
func TestCreatedInstanceOfAnEarlierAgentIsStartedNotReplaced(t *testing.T) {
	pod := onNode(testPod("created"))
	rt := &countingRuntime{fakeRuntime: newFakeRuntime()}
	prev := adoptedInstance(pod, "p-1", 1, runtime.StateExited)
	cur := adoptedInstance(pod, "c-1", 2, runtime.StateCreated)
	rt.byID[prev.ID], rt.byID[cur.ID] = prev, cur
	m, statuses, _ := newAdoptionManager(t, rt, pod)
	m.UpdatePod(pod)
	waitStatus(t, statuses, pod.UID, "the created instance running", func(s v1.PodStatus) bool {
		return len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Running != nil &&
			s.ContainerStatuses[0].ContainerID == "podvisor://c-1" && s.ContainerStatuses[0].RestartCount == 2
	})
	created, started, _, _ := rt.calls()
	if created != 0 || len(started) != 1 || started[0] != "c-1" {
		t.Errorf("created %d, started %v: want 0 and [c-1]", created, started)
	}
}

// Two readers of the runtime may deliver their reads out of order; a worker
// must never take an instance back from exited to running.
func TestObserveNeverGoesBackInState(t *testing.T) {
	pod := testPod("order")
	w := newWorker(&Manager{}, pod, nil, nil)
	exited := adoptedInstance(pod, "o-1", 0, runtime.StateExited)
	running := adoptedInstance(pod, "o-1", 0, runtime.StateRunning)
	w.observe(exited)
	w.observe(running)
	if got := w.instancesOf("c")[0].State; got != runtime.StateExited {
		t.Fatalf("state = %v after a late running read, want exited", got)
	}
}
