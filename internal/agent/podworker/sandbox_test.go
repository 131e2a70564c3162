package podworker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/runtime"
)

func startManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}

// One sandbox before the first container: its IP is the pod's, every
// container joins it, and it goes with the pod.
func TestSandboxComesFirstAndGoesWithThePod(t *testing.T) {
	rt := newFakeRuntime()
	rt.sandboxIP = "10.88.0.7"
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", HostIP: "192.0.2.1", PodsDir: t.TempDir(), Runtime: setOf(rt),
		Status: statuses, Recorder: record.NewFakeRecorder(100)})
	pod := testPod("web")
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "d", Command: []string{"sleep", "3600"}})
	m.UpdatePod(pod)
	st := waitStatus(t, statuses, pod.UID, "both containers running", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 2 && st.ContainerStatuses[0].State.Running != nil && st.ContainerStatuses[1].State.Running != nil
	})
	if st.PodIP != "10.88.0.7" || len(st.PodIPs) != 1 || st.PodIPs[0].IP != "10.88.0.7" || st.HostIP != "192.0.2.1" {
		t.Errorf("podIP %q podIPs %v hostIP %q: want the sandbox's IP and the node's", st.PodIP, st.PodIPs, st.HostIP)
	}
	sbs, _ := rt.ListSandboxes(context.Background())
	if len(sbs) != 1 || sbs[0].PodUID != string(pod.UID) || sbs[0].Attempt != 0 {
		t.Fatalf("sandboxes %+v, want one of attempt 0 for the pod", sbs)
	}
	list, _ := rt.List(context.Background())
	for _, c := range list {
		if c.SandboxID != sbs[0].ID {
			t.Errorf("container %s in sandbox %q, want %q", c.Name, c.SandboxID, sbs[0].ID)
		}
	}
	if c := podCondition(st, v1.PodReadyToStartContainers); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("PodReadyToStartContainers %+v, want True", c)
	}
	m.RemovePod(pod)
	waitFor(t, "the sandbox removed with the pod", func() bool {
		sbs, _ := rt.ListSandboxes(context.Background())
		return len(sbs) == 0
	})
}

// A sandbox that cannot be made: an event, containers waiting, and a retry
// after sandboxRetry that succeeds.
func TestSandboxFailureIsRetried(t *testing.T) {
	rt := newFakeRuntime()
	rt.sandboxFailures = 1
	clk := clocktesting.NewFakeClock(time.Now())
	rec := record.NewFakeRecorder(100)
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Clock: clk,
		Status: statuses, Recorder: rec})
	pod := testPod("web")
	m.UpdatePod(pod)
	waitFor(t, "a FailedCreatePodSandBox event", func() bool {
		select {
		case e := <-rec.Events:
			return strings.Contains(e, "FailedCreatePodSandBox Failed to create pod sandbox: no network")
		default:
			return false
		}
	})
	st := waitStatus(t, statuses, pod.UID, "the container waiting", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Waiting != nil
	})
	if c := podCondition(st, v1.PodReadyToStartContainers); c == nil || c.Status != v1.ConditionFalse {
		t.Errorf("PodReadyToStartContainers %+v, want False without a sandbox", c)
	}
	if list, _ := rt.List(context.Background()); len(list) != 0 {
		t.Fatalf("containers created without a sandbox: %+v", list)
	}
	// The retry timer may not be set yet when the event is seen: step the
	// clock until the retry has happened.
	waitFor(t, "running after the retry", func() bool {
		clk.Step(sandboxRetry)
		st, _ := statuses.get(pod.UID)
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
	})
}

// A sandbox that dies behind the agent's back (its event comes from the
// runtime): the containers still running in it are stopped, the dead
// sandbox is stopped (its network released), the pod runs again in a new
// sandbox with its init container first, and SandboxChanged says so once.
func TestDeadSandboxIsReplaced(t *testing.T) {
	rt := newFakeRuntime()
	rec := record.NewFakeRecorder(100)
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Status: statuses, Recorder: rec})
	pod := testPod("web")
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Command: []string{"true"}}}
	m.UpdatePod(pod)
	waitFor(t, "the init container running", func() bool {
		list, _ := rt.List(context.Background())
		return len(list) == 1 && list[0].State == runtime.StateRunning
	})
	rt.exit(t, "init", 0)
	waitStatus(t, statuses, pod.UID, "the container running", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
	})
	sbs, _ := rt.ListSandboxes(context.Background())
	if len(sbs) != 1 {
		t.Fatalf("sandboxes %+v, want one", sbs)
	}
	old := sbs[0].ID
	rt.mu.Lock()
	sb := rt.sandboxes[old]
	sb.State = runtime.SandboxNotReady // dead, not stopped: the fake counts stops
	rt.sandboxes[old] = sb
	rt.mu.Unlock()
	rt.events <- runtime.Event{ID: old, PodUID: string(pod.UID), State: runtime.StateExited, Sandbox: true}
	waitStatus(t, statuses, pod.UID, "the init container running again", func(st v1.PodStatus) bool {
		return len(st.InitContainerStatuses) == 1 && st.InitContainerStatuses[0].State.Running != nil &&
			st.InitContainerStatuses[0].RestartCount == 1
	})
	rt.exit(t, "init", 0)

	st := waitStatus(t, statuses, pod.UID, "the container running again in a new sandbox", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil &&
			st.ContainerStatuses[0].RestartCount == 1 && len(st.InitContainerStatuses) == 1 &&
			st.InitContainerStatuses[0].RestartCount == 1
	})
	if c := podCondition(st, v1.PodReadyToStartContainers); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("PodReadyToStartContainers %+v, want True in the new sandbox", c)
	}
	sbs, _ = rt.ListSandboxes(context.Background())
	if len(sbs) != 2 || sbs[1].Attempt != 1 && sbs[0].Attempt != 1 {
		t.Fatalf("sandboxes %+v, want the dead one and one of attempt 1", sbs)
	}
	if n := rt.sandboxStops[old]; n != 1 {
		t.Errorf("the dead sandbox was stopped %d times, want once", n)
	}
	list, _ := rt.List(context.Background())
	for _, c := range list {
		if c.SandboxID == old && c.State != runtime.StateExited {
			t.Errorf("container %s still %v in the dead sandbox", c.Name, c.State)
		}
	}
	changed := 0
	for done := false; !done; {
		select {
		case e := <-rec.Events:
			if strings.Contains(e, "SandboxChanged Pod sandbox changed, it will be killed and re-created.") {
				changed++
			}
		default:
			done = true
		}
	}
	if changed != 1 {
		t.Errorf("%d SandboxChanged events, want 1", changed)
	}
}

// A sandbox whose stop fails (a CNI plugin's error) keeps its address
// until a later stop succeeds: the worker tries again sandboxRetry later.
// Until then the pod is not reported Succeeded (lifecycle.HoldTerminalPhase):
// the API would take a graceful delete of it at once.
func TestFailedSandboxStopIsRetried(t *testing.T) {
	rt := newFakeRuntime()
	rt.stopFailures = 1
	clk := clocktesting.NewFakeClock(time.Now())
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Clock: clk,
		Status: statuses, Recorder: record.NewFakeRecorder(100)})
	pod := testPod("job")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	m.UpdatePod(pod)
	waitFor(t, "the container running", func() bool {
		list, _ := rt.List(context.Background())
		return len(list) == 1 && list[0].State == runtime.StateRunning
	})
	rt.exit(t, "c", 0)
	// The first stop fails; the clock holds the retry back.
	st := waitStatus(t, statuses, pod.UID, "the container terminated", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Terminated != nil
	})
	if st.Phase != v1.PodRunning {
		t.Errorf("phase %s while the sandbox's stop had failed, want Running (held)", st.Phase)
	}
	stopped := func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		for id, sb := range rt.sandboxes {
			return sb.State == runtime.SandboxNotReady && rt.sandboxStops[id] == 1
		}
		return false
	}
	waitFor(t, "the failed stop tried again", func() bool {
		clk.Step(sandboxRetry)
		return stopped()
	})
	waitStatus(t, statuses, pod.UID, "Succeeded once the sandbox is stopped", func(st v1.PodStatus) bool { return st.Phase == v1.PodSucceeded })
}

// The final delete of a pod waits for its sandbox's stop to return: one
// whose stop failed holds the delete until the retry stops it.
func TestDeleteWaitsForTheSandboxStop(t *testing.T) {
	rt := newFakeRuntime()
	rt.stopFailures = 1 << 30 // until the test lets it stop
	clk := clocktesting.NewFakeClock(time.Now())
	var mu sync.Mutex
	var deletes, early int
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}, onDelete: func(types.UID) {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		deletes++
		for _, sb := range rt.sandboxes {
			if sb.State != runtime.SandboxNotReady {
				early++
			}
		}
	}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Clock: clk,
		Status: statuses, Recorder: record.NewFakeRecorder(100)})
	pod := runThenDelete(t, m, rt, clk, "web")
	waitStatus(t, statuses, pod.UID, "the container stopped", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Terminated != nil
	})
	waitFor(t, "the sandbox's stop tried and retried", func() bool {
		clk.Step(sandboxRetry)
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.stopFailures <= 1<<30-2
	})
	mu.Lock()
	n := deletes
	mu.Unlock()
	if n != 0 {
		t.Fatalf("%d deletes asked for while the sandbox's stop failed", n)
	}
	rt.mu.Lock()
	rt.stopFailures = 0
	rt.mu.Unlock()
	waitFor(t, "the delete once the stop is retried", func() bool {
		clk.Step(sandboxRetry)
		mu.Lock()
		defer mu.Unlock()
		return deletes > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if early != 0 {
		t.Errorf("a delete was asked for while a sandbox was ready")
	}
}

// A pod force-deleted while its sandbox is being made: the sandbox, made
// after the worker removed the pod's others, is removed too, not leaked
// (its shim and pause process would run on until the next agent start).
func TestSandboxMadeAfterThePodWentIsRemoved(t *testing.T) {
	rt := newFakeRuntime()
	gate := make(chan struct{})
	rt.sandboxGate = gate
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt),
		Status: statuses, Recorder: record.NewFakeRecorder(100)})
	pod := testPod("web")
	m.UpdatePod(pod)
	waitFor(t, "the sandbox being made", func() bool {
		w := m.worker(pod.UID)
		if w == nil {
			return false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.sandboxBusy
	})
	m.RemovePod(pod)
	waitFor(t, "the worker finished", func() bool { return m.worker(pod.UID) == nil })
	close(gate)
	waitFor(t, "the late sandbox removed", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.next > 0 && len(rt.sandboxes) == 0
	})
}

// On a runtime with pod networks the sandbox gets the pod's DNS: without
// clusterDNS a ClusterFirst pod falls back to the node's resolv.conf with
// upstream's MissingClusterDNS warning; the hostname is the FQDN with
// setHostnameAsFQDN.
func TestSandboxGetsThePodsNamesAndDNS(t *testing.T) {
	rt := newFakeRuntime()
	rt.podNetwork = true
	rec := record.NewFakeRecorder(100)
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.0.2.53\nsearch corp.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Recorder: rec,
		Status: &statusLog{last: map[types.UID]v1.PodStatus{}}, DNS: DNSConfig{ClusterDomain: "cluster.local", ResolvConf: resolv}})
	pod := testPod("web")
	pod.Spec.Hostname, pod.Spec.Subdomain, pod.Spec.SetHostnameAsFQDN = "w-0", "web", ptr.To(true)
	m.UpdatePod(pod)
	waitFor(t, "a sandbox", func() bool {
		sbs, _ := rt.ListSandboxes(context.Background())
		return len(sbs) == 1
	})
	rt.mu.Lock()
	spec := rt.lastSandbox
	rt.mu.Unlock()
	if spec.Hostname != "w-0.web.ns.svc.cluster.local" {
		t.Errorf("hostname %q", spec.Hostname)
	}
	if spec.DNS == nil || fmt.Sprint(spec.DNS.Servers, spec.DNS.Searches) != "[192.0.2.53] [corp.example]" {
		t.Errorf("DNS %+v, want the node's resolv.conf", spec.DNS)
	}
	want := `Warning MissingClusterDNS pod: "web_ns(uid-web)". kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`
	waitFor(t, "the MissingClusterDNS event", func() bool {
		select {
		case e := <-rec.Events:
			return e == want
		default:
			return false
		}
	})
}

// An exit event whose status read fails (a runtime slow under load) is
// read again: the exit is not lost.
func TestExitReadAgainWhenTheStatusReadFails(t *testing.T) {
	rt := newFakeRuntime()
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Status: statuses, Recorder: record.NewFakeRecorder(100)})
	pod := testPod("job")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	m.UpdatePod(pod)
	waitStatus(t, statuses, pod.UID, "running", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
	})
	rt.mu.Lock()
	rt.statusFailures = 2
	rt.mu.Unlock()
	rt.exit(t, "c", 4)
	waitStatus(t, statuses, pod.UID, "the exit seen", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Terminated != nil &&
			st.ContainerStatuses[0].State.Terminated.ExitCode == 4
	})
}

func podCondition(st v1.PodStatus, t v1.PodConditionType) *v1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ testRuntime = (*fakeRuntime)(nil)
