package podworker

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/hook"
	"github.com/podvisor/podvisor/internal/runtime"
)

// fakeRuntime runs nothing: Start makes an instance running at once.
type fakeRuntime struct {
	mu        sync.Mutex
	next      int
	byID      map[string]runtime.Status
	sandboxes map[string]runtime.SandboxStatus
	events    chan runtime.Event
	// sandboxIP is every sandbox's IP (default 127.0.0.1); sandboxFailures
	// RunSandbox calls fail first.
	sandboxIP       string
	sandboxFailures int
	sandboxStops    map[string]int // StopSandbox calls by sandbox
	// stopFailures StopSandbox calls fail first (as a CNI DEL can).
	stopFailures int
	podNetwork   bool // Features.PodNetwork
	// statusFailures Status calls of exited instances fail first (a
	// runtime slow to answer).
	statusFailures int
	lastSandbox    runtime.SandboxSpec
	// specs are the resources each instance was created with; updates the
	// UpdateResources calls, in order; updateFailures of them fail first.
	specs          map[string]runtime.Resources
	updates        []resourceUpdate
	updateFailures int
	memoryUsage    int64 // every container's working set
	// sandboxGate, if set, holds every RunSandbox until it is closed (a
	// sandbox slow to make).
	sandboxGate chan struct{}
}

type resourceUpdate struct {
	id string
	r  runtime.Resources
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{byID: map[string]runtime.Status{}, sandboxes: map[string]runtime.SandboxStatus{},
		sandboxStops: map[string]int{}, events: make(chan runtime.Event, 100), specs: map[string]runtime.Resources{}}
}

func (f *fakeRuntime) Features() runtime.Features {
	return runtime.Features{Mounts: true, Limits: true, Users: true, PodNetwork: f.podNetwork}
}

// testRuntime is what fakeRuntime and the fakes built on it implement.
type testRuntime interface {
	runtime.Containers
	runtime.Sandboxes
	runtime.Executor
	runtime.Stats
	Events() <-chan runtime.Event
	Features() runtime.Features
}

// setOf is the runtime set of a fake: every concern of r, with Images
// when r has an image store (imageRuntime).
func setOf(r testRuntime) runtime.Set {
	s := runtime.Set{Info: runtime.Info{Name: "podvisor", Version: "fake"}, Features: r.Features(),
		Containers: r, Sandboxes: r, Exec: r, Stats: r, Events: r.Events()}
	if im, ok := r.(runtime.Images); ok {
		s.Images = im
	}
	return s
}

func (f *fakeRuntime) RunSandbox(_ context.Context, s runtime.SandboxSpec) (string, error) {
	f.mu.Lock()
	gate := f.sandboxGate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sandboxFailures > 0 {
		f.sandboxFailures--
		return "", fmt.Errorf("no network: %w", runtime.ErrUnavailable)
	}
	f.lastSandbox = s
	f.next++
	id := "sandbox-" + string(rune('a'+f.next))
	ip := f.sandboxIP
	if ip == "" {
		ip = "127.0.0.1"
	}
	f.sandboxes[id] = runtime.SandboxStatus{ID: id, PodUID: s.PodUID, PodNamespace: s.PodNamespace, PodName: s.PodName,
		Attempt: s.Attempt, State: runtime.SandboxReady, CreatedAt: time.Now(), IPs: []string{ip}, HostNetwork: true}
	return id, nil
}

func (f *fakeRuntime) StopSandbox(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return runtime.ErrNotFound
	}
	if f.stopFailures > 0 {
		f.stopFailures--
		return fmt.Errorf("plugin type=\"bridge\" failed (delete): failed to delete \"eth0\": no such device")
	}
	sb.State = runtime.SandboxNotReady
	f.sandboxes[id] = sb
	f.sandboxStops[id]++
	return nil
}

func (f *fakeRuntime) RemoveSandbox(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, id)
	return nil
}

func (f *fakeRuntime) SandboxStatus(_ context.Context, id string) (runtime.SandboxStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	if !ok {
		return sb, runtime.ErrNotFound
	}
	return sb, nil
}

func (f *fakeRuntime) ListSandboxes(context.Context) ([]runtime.SandboxStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.sandboxes)), nil
}

func (f *fakeRuntime) Create(_ context.Context, s runtime.ContainerSpec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	id := s.Name + "-" + string(rune('a'+f.next))
	f.byID[id] = runtime.Status{ID: id, SandboxID: s.SandboxID, PodUID: s.PodUID, Name: s.Name, Attempt: s.Attempt, State: runtime.StateCreated, CreatedAt: time.Now()}
	f.specs[id] = s.Resources
	return id, nil
}

func (f *fakeRuntime) Start(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.byID[id]
	st.State, st.StartedAt = runtime.StateRunning, time.Now()
	f.byID[id] = st
	return nil
}

func (f *fakeRuntime) Stop(_ context.Context, id string, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.byID[id]
	st.State, st.FinishedAt, st.ExitCode = runtime.StateExited, time.Now(), 137
	f.byID[id] = st
	return nil
}

func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.byID, id)
	return nil
}

func (f *fakeRuntime) Status(_ context.Context, id string) (runtime.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.byID[id]
	if !ok {
		return st, runtime.ErrNotFound
	}
	if st.State == runtime.StateExited && f.statusFailures > 0 {
		f.statusFailures--
		return runtime.Status{}, fmt.Errorf("status of %s: deadline exceeded: %w", id, runtime.ErrTimeout)
	}
	return st, nil
}

func (f *fakeRuntime) List(context.Context) ([]runtime.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.byID)), nil
}

func (f *fakeRuntime) Exec(context.Context, string, []string, io.Writer, io.Writer, time.Duration) (int, error) {
	return 0, nil
}

func (f *fakeRuntime) Events() <-chan runtime.Event { return f.events }

func (f *fakeRuntime) Usage(context.Context, string) (runtime.Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return runtime.Usage{MemoryWorkingSet: f.memoryUsage}, nil
}

func (f *fakeRuntime) UpdateResources(_ context.Context, id string, r runtime.Resources) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.updateFailures > 0 {
		f.updateFailures--
		return fmt.Errorf("update %s: device or resource busy: %w", id, runtime.ErrConflict)
	}
	f.updates = append(f.updates, resourceUpdate{id, r})
	return nil
}

func (f *fakeRuntime) resourceUpdates() []resourceUpdate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.updates)
}

// statusLog keeps the newest status written per pod; onDelete, if set, is
// called when the final delete of a pod is asked for.
type statusLog struct {
	mu       sync.Mutex
	last     map[types.UID]v1.PodStatus
	onDelete func(uid types.UID)
}

func (s *statusLog) Set(pod *v1.Pod, st v1.PodStatus, deleteAfter bool) {
	s.mu.Lock()
	s.last[pod.UID] = st
	onDelete := s.onDelete
	s.mu.Unlock()
	if deleteAfter && onDelete != nil {
		onDelete(pod.UID)
	}
}

func (s *statusLog) Forget(types.UID) {}

func (s *statusLog) get(uid types.UID) (v1.PodStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.last[uid]
	return st, ok
}

func testPod(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Command: []string{"sleep", "3600"}}},
			RestartPolicy: v1.RestartPolicyAlways},
	}
}

// A panic while handling one pod must not take down the agent or other pods:
// the bad pod gets a FailedSync event, the good one runs.
func TestPanicInOnePodSparesTheOthers(t *testing.T) {
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	rec := record.NewFakeRecorder(100)
	m, err := New(Config{
		NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(newFakeRuntime()),
		Status: statuses, Recorder: rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	bad, good := testPod("bad"), testPod("good")
	syncHook = func(w *worker) {
		if w.uid == bad.UID {
			panic("boom")
		}
	}
	defer func() { syncHook = nil }()
	m.UpdatePod(bad)
	m.UpdatePod(good)

	deadline := time.Now().Add(10 * time.Second)
	sawFailedSync := false
	for time.Now().Before(deadline) {
		select {
		case e := <-rec.Events:
			if strings.Contains(e, "FailedSync") && strings.Contains(e, "boom") {
				sawFailedSync = true
			}
		default:
		}
		st, ok := statuses.get(good.UID)
		if sawFailedSync && ok && st.Phase == v1.PodRunning && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, _ := statuses.get(good.UID)
	t.Fatalf("sawFailedSync=%v, good pod status: %+v", sawFailedSync, st)
}

// blockingHooks is a postStart that never returns by itself (as a sleep of a
// year), until its context ends.
type blockingHooks struct{}

func (blockingHooks) Run(ctx context.Context, _ hook.Kind, _ *v1.Pod, _ *v1.Container, _, _ string, _ *v1.LifecycleHandler, _ time.Duration) (string, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

// A postStart hook that never returns held the container in "starting", and
// the core never stops what is starting: a deletion never finished (the
// hostile-specs e2e test's postStart sleep of MaxInt64 seconds). Termination
// cuts the hook short, then stops the container.
func TestDeletionCutsAHangingPostStartShort(t *testing.T) {
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	rt := newFakeRuntime()
	m, err := New(Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Status: statuses,
		Recorder: record.NewFakeRecorder(100), Hooks: blockingHooks{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pod := testPod("hang")
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 1 << 40}}}
	m.UpdatePod(pod)
	waitStatus(t, statuses, pod.UID, "postStart in flight", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].ContainerID != ""
	})
	deleted := pod.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleted.DeletionGracePeriodSeconds = ptr.To[int64](1)
	m.UpdatePod(deleted)
	waitStatus(t, statuses, pod.UID, "a terminal phase after the deletion", func(st v1.PodStatus) bool {
		return st.Phase == v1.PodFailed || st.Phase == v1.PodSucceeded
	})
}

// The agent's own decision to stop a pod (eviction, node shutdown) with an
// earlier deadline than the deletion in progress cuts the stops already
// under way to it (§8): here a preStop hook with the deletion's hour of
// budget ends at once, and the pod stops.
func TestAgentTerminationShortensADeletionInFlight(t *testing.T) {
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(newFakeRuntime()), Status: statuses,
		Recorder: record.NewFakeRecorder(100), Hooks: blockingHooks{}})
	pod := testPod("evicted")
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 3600}}}
	m.UpdatePod(pod)
	waitStatus(t, statuses, pod.UID, "running", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
	})
	deleted := pod.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleted.DeletionGracePeriodSeconds = ptr.To[int64](3600)
	m.UpdatePod(deleted)
	waitFor(t, "the preStop hook to start", func() bool {
		w := m.worker(pod.UID)
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, f := range w.instFacts {
			if f.preStopCancel != nil {
				n++
			}
		}
		return n == 1
	})
	stopped := m.TerminatePod(pod.UID, Termination{Grace: 0, Reason: "Evicted", Message: "The node was low on resource: memory."})
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("the pod still runs 15 s after an eviction with grace 0 took over a deletion with an hour of grace")
	}
}
