package podworker

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/podvisor/podvisor/internal/agent/podcgroup"
)

func resizablePod(name, cpu, mem string) *v1.Pod {
	pod := testPod(name)
	pod.Generation = 1
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)},
	}
	return pod
}

func resized(pod *v1.Pod, cpu, mem string) *v1.Pod {
	out := resizablePod(pod.Name, cpu, mem)
	out.Generation = pod.Generation + 1
	return out
}

func hasCond(st v1.PodStatus, t v1.PodConditionType) *v1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func resizedTo(cpu, mem string) func(v1.PodStatus) bool {
	return func(st v1.PodStatus) bool {
		if len(st.ContainerStatuses) != 1 || st.ContainerStatuses[0].Resources == nil || st.ObservedGeneration < 2 {
			return false
		}
		r := st.ContainerStatuses[0].Resources
		return r.Limits.Cpu().Equal(resource.MustParse(cpu)) && r.Limits.Memory().Equal(resource.MustParse(mem)) &&
			hasCond(st, v1.PodResizeInProgress) == nil && hasCond(st, v1.PodResizePending) == nil
	}
}

func waitRunning(t *testing.T, statuses *statusLog, pod *v1.Pod) {
	t.Helper()
	waitStatus(t, statuses, pod.UID, "running", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
	})
}

// resizeRunning runs pod (100m, 64Mi) on a node of 2 CPUs and 1Gi (cpu
// overrides the CPUs), waits for it to run, then asks for cpu and mem.
func resizeRunning(t *testing.T, rt *fakeRuntime, nodeCPU, cpu, mem string) (managerRun, *v1.Pod) {
	t.Helper()
	node := v1.ResourceList{v1.ResourceCPU: resource.MustParse(nodeCPU), v1.ResourceMemory: resource.MustParse("1Gi")}
	r := runManager(t, rt, t.TempDir(), node)
	pod := resizablePod(strings.ToLower(t.Name()), "100m", "64Mi")
	r.m.UpdatePod(pod)
	waitRunning(t, r.statuses, pod)
	r.m.UpdatePod(resized(pod, cpu, mem))
	return r, pod
}

// resizeError waits for PodResizeInProgress with reason Error.
func resizeError(t *testing.T, r managerRun, pod *v1.Pod) (v1.PodStatus, *v1.PodCondition) {
	t.Helper()
	st := waitStatus(t, r.statuses, pod.UID, "PodResizeInProgress Error", func(st v1.PodStatus) bool {
		c := hasCond(st, v1.PodResizeInProgress)
		return c != nil && c.Reason == "Error"
	})
	return st, hasCond(st, v1.PodResizeInProgress)
}

type managerRun struct {
	m        *Manager
	statuses *statusLog
	stop     context.CancelFunc
}

func runManager(t *testing.T, rt testRuntime, dir string, alloc v1.ResourceList, cg ...PodCgroups) managerRun {
	t.Helper()
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	cfg := Config{NodeName: "n", PodsDir: dir, Runtime: setOf(rt), Status: statuses, Recorder: record.NewFakeRecorder(1000),
		Allocatable: func() v1.ResourceList { return alloc }}
	if len(cg) > 0 {
		cfg.Cgroups = cg[0]
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return managerRun{m, statuses, cancel}
}

// A resize of a running pod is allocated and carried out in place (the
// runtime gets the new limits, nothing restarts); the allocation survives
// an agent restart, which then neither resizes nor restarts anything.
func TestResizeInPlaceAndAcrossARestart(t *testing.T) {
	rt := &countingRuntime{fakeRuntime: newFakeRuntime()}
	dir := t.TempDir()
	node := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}
	r1 := runManager(t, rt, dir, node)
	pod := resizablePod("r", "100m", "64Mi")
	r1.m.UpdatePod(pod)
	waitRunning(t, r1.statuses, pod)
	if got := rt.fakeRuntime.specs; len(got) != 1 {
		t.Fatalf("instances created: %v", got)
	}

	big := resized(pod, "200m", "128Mi")
	r1.m.UpdatePod(big)
	st := waitStatus(t, r1.statuses, pod.UID, "resized to 200m/128Mi", resizedTo("200m", "128Mi"))
	if a := st.ContainerStatuses[0].AllocatedResources; !a.Cpu().Equal(resource.MustParse("200m")) {
		t.Errorf("allocatedResources %v, want the new requests", a)
	}
	ups := rt.resourceUpdates()
	if len(ups) != 1 || ups[0].r.MemoryLimitBytes != 128<<20 || ups[0].r.CPUQuotaMicros != 20000 || ups[0].r.CPUShares != 204 {
		t.Fatalf("UpdateResources calls %+v, want one with 128Mi, quota 20000, shares 204", ups)
	}
	if created, _, stopped, _ := rt.calls(); created != 1 || len(stopped) != 0 || st.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the resize restarted the container: %d created, %v stopped, restartCount %d", created, stopped, st.ContainerStatuses[0].RestartCount)
	}

	r1.stop()
	r2 := runManager(t, rt, dir, node)
	r2.m.UpdatePod(big)
	waitStatus(t, r2.statuses, pod.UID, "the re-adopted pod as resized", resizedTo("200m", "128Mi"))
	if ups := rt.resourceUpdates(); len(ups) != 1 {
		t.Errorf("after the restart: UpdateResources calls %+v, want none more", ups)
	}
	if created, _, stopped, _ := rt.calls(); created != 1 || len(stopped) != 0 {
		t.Errorf("after the restart: %d created, %v stopped; want nothing", created, stopped)
	}
}

// A resize the node has no room for is Deferred with the admission's
// message, and the pod keeps running as allocated.
func TestResizeDeferredWithoutRoom(t *testing.T) {
	rt := newFakeRuntime()
	r, pod := resizeRunning(t, rt, "1", "1500m", "64Mi")
	st := waitStatus(t, r.statuses, pod.UID, "PodResizePending", func(st v1.PodStatus) bool { return hasCond(st, v1.PodResizePending) != nil })
	c := hasCond(st, v1.PodResizePending)
	if c.Reason != "Deferred" || !strings.HasPrefix(c.Message, "Node didn't have enough resource: cpu, requested: 1500, used: 0, capacity: 1000") {
		t.Errorf("PodResizePending %q %q", c.Reason, c.Message)
	}
	if res := st.ContainerStatuses[0].Resources; !res.Limits.Cpu().Equal(resource.MustParse("100m")) {
		t.Errorf("resources %v, want the allocation (100m)", res)
	}
	if ups := rt.resourceUpdates(); len(ups) != 0 {
		t.Errorf("a deferred resize was actuated: %+v", ups)
	}
}

// A failed update shows as PodResizeInProgress with reason Error and is
// tried again.
func TestResizeErrorIsRetried(t *testing.T) {
	rt := newFakeRuntime()
	rt.updateFailures = 1
	r, pod := resizeRunning(t, rt, "2", "200m", "64Mi")
	if _, c := resizeError(t, r, pod); !strings.Contains(c.Message, "device or resource busy") {
		t.Errorf("message %q, want the runtime's error", c.Message)
	}
}

// A memory limit lowered below what the container uses is refused before
// anything changes, with upstream's message, and the status keeps the
// limit the container has.
func TestResizeRefusesMemoryBelowUsage(t *testing.T) {
	rt := newFakeRuntime()
	rt.memoryUsage = 50 << 20
	r, pod := resizeRunning(t, rt, "2", "100m", "32Mi")
	st, c := resizeError(t, r, pod)
	want := `cannot decrease memory limits: attempting to set container "c" memory limit (33554432) below current usage (52428800)`
	if c.Message != want {
		t.Errorf("message %q, want %q", c.Message, want)
	}
	if res := st.ContainerStatuses[0].Resources; !res.Limits.Memory().Equal(resource.MustParse("64Mi")) {
		t.Errorf("resources %v, want the limit the container has (64Mi)", res)
	}
	if ups := rt.resourceUpdates(); len(ups) != 0 {
		t.Errorf("the refused resize was carried out: %+v", ups)
	}
}

// podCgroupLog records the pod cgroup's writes, and what the runtime had
// created by then.
type podCgroupLog struct {
	rt     *fakeRuntime
	mu     sync.Mutex
	writes []cgroupWrite
}

type cgroupWrite struct {
	l         podcgroup.Limits
	instances int
}

func (c *podCgroupLog) Processes(string) (int64, error) { return 0, nil }

func (c *podCgroupLog) KillProcesses(string) ([]int, error) { return nil, nil }

func (c *podCgroupLog) Ensure(_ string, l podcgroup.Limits) error {
	c.rt.mu.Lock()
	n := len(c.rt.specs)
	c.rt.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, cgroupWrite{l, n})
	return nil
}

func (c *podCgroupLog) Remove(string) error { return nil }

func (c *podCgroupLog) log() []cgroupWrite {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.writes)
}

// A container restarted for a resize starts inside a pod cgroup already
// grown to its new limits (a CFS quota above the parent's is refused);
// once it runs, the pod cgroup holds the new limits only.
func TestResizeRestartGrowsThePodCgroupFirst(t *testing.T) {
	rt := newFakeRuntime()
	cg := &podCgroupLog{rt: rt}
	node := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}
	r := runManager(t, rt, t.TempDir(), node, cg)
	pod := resizablePod("cg", "100m", "64Mi")
	pod.Spec.Containers[0].ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceCPU, RestartPolicy: v1.RestartContainer}}
	r.m.UpdatePod(pod)
	waitRunning(t, r.statuses, pod)
	big := resized(pod, "300m", "64Mi")
	big.Spec.Containers[0].ResizePolicy = pod.Spec.Containers[0].ResizePolicy
	r.m.UpdatePod(big)
	waitStatus(t, r.statuses, pod.UID, "restarted with 300m", func(st v1.PodStatus) bool {
		return resizedTo("300m", "64Mi")(st) && st.ContainerStatuses[0].RestartCount == 1 && st.ContainerStatuses[0].State.Running != nil
	})
	var grown, final *cgroupWrite
	writes := cg.log()
	for i, w := range writes {
		if w.l.CPUQuota == 30000 && grown == nil {
			grown = &writes[i]
		}
	}
	if len(writes) > 0 {
		final = &writes[len(writes)-1]
	}
	if grown == nil || grown.instances != 1 {
		t.Fatalf("pod cgroup writes %+v: want the 300m quota before the second instance was created", writes)
	}
	if final.l != (podcgroup.Limits{CPUShares: 307, CPUQuota: 30000, MemoryBytes: 64 << 20}) {
		t.Errorf("pod cgroup at the end %+v, want the new allocation's", final.l)
	}
}
