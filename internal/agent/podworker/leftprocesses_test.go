package podworker

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/podcgroup"
	"github.com/podvisor/podvisor/internal/runtime"
)

// leftCgroup is a pod cgroup in which a process is left (one that escaped
// its container: issue 25's runc init) until it is killed.
type leftCgroup struct {
	clk      *clocktesting.FakeClock
	mu       sync.Mutex
	left     int64
	seenAt   time.Time // first read of the count once the pod was done
	killedAt time.Time
}

func (c *leftCgroup) Ensure(string, podcgroup.Limits) error { return nil }

func (c *leftCgroup) Remove(parent string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left > 0 {
		return fmt.Errorf("remove cgroup %s: %w", parent, syscall.EBUSY)
	}
	return nil
}

func (c *leftCgroup) Processes(string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seenAt.IsZero() {
		c.seenAt = c.clk.Now()
	}
	return c.left, nil
}

func (c *leftCgroup) KillProcesses(string) ([]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.left == 0 {
		return nil, nil
	}
	c.left, c.killedAt = 0, c.clk.Now()
	return []int{4242}, nil
}

// A process left in the cgroup of a pod being deleted, its containers and
// sandbox stopped, holds the final delete; it is killed once it has been
// left for lifecycle.LeftProcessesGrace, and the delete follows. (Before,
// such a pod stayed Terminating for good.)
func TestLeftProcessIsKilledAndThePodDeleted(t *testing.T) {
	rt := newFakeRuntime()
	clk := clocktesting.NewFakeClock(time.Now())
	cg := &leftCgroup{clk: clk, left: 1}
	var mu sync.Mutex
	var deletes, early int
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}, onDelete: func(types.UID) {
		cg.mu.Lock()
		defer cg.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		deletes++
		if cg.left > 0 {
			early++
		}
	}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Clock: clk,
		Status: statuses, Recorder: record.NewFakeRecorder(100), Cgroups: cg})
	runThenDelete(t, m, rt, clk, "web")
	waitFor(t, "the left process seen", func() bool {
		cg.mu.Lock()
		defer cg.mu.Unlock()
		return !cg.seenAt.IsZero()
	})
	waitFor(t, "the delete once the left process is killed", func() bool {
		clk.Step(processesLeftPoll)
		mu.Lock()
		defer mu.Unlock()
		return deletes > 0
	})
	cg.mu.Lock()
	defer cg.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if early != 0 {
		t.Errorf("the delete was asked for while a process was left")
	}
	if left := cg.killedAt.Sub(cg.seenAt); left < lifecycle.LeftProcessesGrace {
		t.Errorf("killed %v after it was first seen, want at least %v", left, lifecycle.LeftProcessesGrace)
	}
}

// A pod the API no longer has may leave a process in its cgroup that no
// container or sandbox accounts for (issue 25: the `runc init` of a start
// that a crash interrupted, left in a crash test): once its instances are
// removed, the cleanup kills it and removes the cgroup. (Before, the
// removal failed with EBUSY and the process ran on.)
func TestCleanupOrphansKillsWhatIsLeftInTheirCgroup(t *testing.T) {
	gone := onNode(testPod("gone"))
	rt := &countingRuntime{fakeRuntime: newFakeRuntime()}
	s := adoptedInstance(gone, "gone-1", 0, runtime.StateCreated)
	rt.byID[s.ID] = s
	cg := &leftCgroup{clk: clocktesting.NewFakeClock(time.Now()), left: 1}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt),
		Status: &statusLog{last: map[types.UID]v1.PodStatus{}}, Recorder: record.NewFakeRecorder(1000),
		Client: fake.NewClientset(), Cgroups: cg})
	if pending := m.CleanupOrphans(context.Background()); pending != 0 {
		t.Fatalf("pending = %d, want 0", pending)
	}
	if _, _, _, removed := rt.calls(); len(removed) != 1 {
		t.Errorf("removed %v, want the orphan's instance", removed)
	}
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if cg.left != 0 || cg.killedAt.IsZero() {
		t.Errorf("%d processes left in the orphan's cgroup, want them killed", cg.left)
	}
}

// runThenDelete runs pod name (no grace period) until its container runs,
// then deletes it.
func runThenDelete(t *testing.T, m *Manager, rt *fakeRuntime, clk *clocktesting.FakeClock, name string) *v1.Pod {
	t.Helper()
	pod := testPod(name)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	m.UpdatePod(pod)
	waitFor(t, "the container running", func() bool {
		list, _ := rt.List(context.Background())
		return len(list) == 1 && list[0].State == runtime.StateRunning
	})
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
	deleting.DeletionGracePeriodSeconds = ptr.To[int64](0)
	m.UpdatePod(deleting)
	return pod
}

// A finished pod that is not being deleted: nothing of it may run, and a
// process left in its cgroup is killed too (the API deletes a finished pod
// at once when asked: issue 25's k4-397, Succeeded, left the API with its
// runc init still running).
func TestLeftProcessOfAFinishedPodIsKilled(t *testing.T) {
	rt := newFakeRuntime()
	clk := clocktesting.NewFakeClock(time.Now())
	cg := &leftCgroup{clk: clk, left: 1}
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Clock: clk,
		Status: statuses, Recorder: record.NewFakeRecorder(100), Cgroups: cg})
	pod := testPod("job")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	m.UpdatePod(pod)
	waitFor(t, "the container running", func() bool {
		list, _ := rt.List(context.Background())
		return len(list) == 1 && list[0].State == runtime.StateRunning
	})
	rt.exit(t, "c", 0)
	waitStatus(t, statuses, pod.UID, "Succeeded", func(st v1.PodStatus) bool { return st.Phase == v1.PodSucceeded })
	waitFor(t, "the left process killed", func() bool {
		clk.Step(processesLeftPoll)
		cg.mu.Lock()
		defer cg.mu.Unlock()
		return cg.left == 0
	})
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if left := cg.killedAt.Sub(cg.seenAt); left < lifecycle.LeftProcessesGrace {
		t.Errorf("killed %v after it was first seen, want at least %v", left, lifecycle.LeftProcessesGrace)
	}
}
