package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/runtime/runtimetest"
)

// In-place pod resize through the resize subresource: the container whose
// resizePolicy allows it keeps running with its new cgroup limits (read
// from inside it); the one whose policy says RestartContainer for memory
// restarts with the new limit; the status shows the new resources and no
// resize condition once done.
func TestInPlaceResize(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("resize")
	script := runtimetest.RecordCgroup + "; cat /proc/self/oom_score_adj > oom-score-adj; exec sleep 3600"
	inPlace := sh("inplace", script)
	inPlace.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resourceMust("100m"), v1.ResourceMemory: resourceMust("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resourceMust("200m"), v1.ResourceMemory: resourceMust("128Mi")},
	}
	restarts := sh("restarts", script)
	restarts.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceMemory: resourceMust("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceMemory: resourceMust("64Mi")},
	}
	restarts.ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	pod := p.pod(ns, "resize", v1.RestartPolicyAlways, inPlace, restarts)
	p.create(t, pod)
	p.waitRunning(t, ns, "resize")

	memory := func(c string) string { return p.cgroupMemory(t, ns, "resize", c) }
	quota := func(c string) string { return p.cgroupQuota(t, ns, "resize", c) }
	if got := memory("inplace"); got != "134217728" {
		t.Fatalf("memory limit before the resize: %s, want 134217728 (128Mi)", got)
	}
	if got := quota("inplace"); got != "20000" {
		t.Fatalf("CPU quota before the resize: %s, want 20000 (200m)", got)
	}

	patch := `{"spec":{"containers":[
		{"name":"inplace","resources":{"requests":{"cpu":"150m","memory":"64Mi"},"limits":{"cpu":"300m","memory":"192Mi"}}},
		{"name":"restarts","resources":{"requests":{"memory":"96Mi"},"limits":{"memory":"96Mi"}}}]}}`
	resized := p.resize(t, ns, "resize", patch)
	done := p.waitPod(t, ns, "resize", 60*time.Second, "the resize done", func(pod *v1.Pod) bool {
		if !resizeDone(pod, resized.Generation) {
			return false
		}
		in, re := containerStatus(pod, "inplace"), containerStatus(pod, "restarts")
		return in != nil && re != nil && in.Resources != nil && re.Resources != nil &&
			in.Resources.Limits.Memory().Equal(resourceMust("192Mi")) && re.Resources.Limits.Memory().Equal(resourceMust("96Mi")) &&
			re.RestartCount == 1 && re.State.Running != nil
	})
	in := containerStatus(done, "inplace")
	if in.RestartCount != 0 {
		t.Errorf("the in-place container restarted (%d)", in.RestartCount)
	}
	if !in.Resources.Limits.Cpu().Equal(resourceMust("300m")) || !in.Resources.Requests.Cpu().Equal(resourceMust("150m")) ||
		!in.AllocatedResources.Cpu().Equal(resourceMust("150m")) {
		t.Errorf("in-place container: resources %v, allocatedResources %v", in.Resources, in.AllocatedResources)
	}
	if got := memory("inplace"); got != "201326592" {
		t.Errorf("memory limit after the resize: %s, want 201326592 (192Mi)", got)
	}
	if got := quota("inplace"); got != "30000" {
		t.Errorf("CPU quota after the resize: %s, want 30000 (300m)", got)
	}
	if got := memory("restarts"); got != "100663296" {
		t.Errorf("memory limit of the restarted container: %s, want 100663296 (96Mi)", got)
	}
	// The restarted instance's OOM score follows its new request, as
	// upstream's QoS policy (the pod is Burstable).
	node, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := 1000 - 1000*(96<<20)/node.Status.Capacity.Memory().Value()
	o, e, code := p.kubectl(t, "", nil, "-n", ns, "exec", "resize", "-c", "restarts", "--", "cat", "oom-score-adj")
	if code != 0 || strings.TrimSpace(o) != fmt.Sprint(want) {
		t.Errorf("oom_score_adj of the restarted container: %q %s (exit %d), want %d", o, e, code, want)
	}
}

// A resized pod across an agent restart: the allocation is remembered, so
// the re-adopted container is neither restarted nor resized again, its
// status and cgroup keep the new limits, and a resize the node had no room
// for stays deferred (not taken from the spec) until a pod leaves.
func TestResizeSurvivesAgentRestart(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ns := p.Namespace("resize-restart")
	c := sh("c", runtimetest.RecordCgroup+"; exec sleep 3600")
	c.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resourceMust("100m"), v1.ResourceMemory: resourceMust("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resourceMust("100m"), v1.ResourceMemory: resourceMust("64Mi")},
	}
	p.create(t, p.pod(ns, "r", v1.RestartPolicyAlways, c))
	p.waitRunning(t, ns, "r")
	resized := p.resize(t, ns, "r", `{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"200m","memory":"96Mi"},"limits":{"cpu":"200m","memory":"96Mi"}}}]}}`)
	before := p.waitPod(t, ns, "r", 60*time.Second, "the resize done", func(pod *v1.Pod) bool { return resizeDone(pod, resized.Generation) })
	id := containerStatus(before, "c").ContainerID

	// Half the node's CPU for another pod; three quarters asked for r.
	node, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	milli := node.Status.Allocatable.Cpu().MilliValue()
	hog := sh("hog", "exec sleep 3600")
	hog.Resources.Requests = v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(milli/2, resource.DecimalSI)}
	p.create(t, p.pod(ns, "hog", v1.RestartPolicyAlways, hog))
	p.waitRunning(t, ns, "hog")
	want := milli * 3 / 4
	deferred := p.resize(t, ns, "r", fmt.Sprintf(`{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"%dm"},"limits":{"cpu":"%dm"}}}]}}`, want, want))
	pending := func(pod *v1.Pod) bool {
		c := condition(pod, v1.PodResizePending)
		return pod.Status.ObservedGeneration >= deferred.Generation && c != nil && c.Reason == "Deferred" &&
			strings.HasPrefix(c.Message, "Node didn't have enough resource: cpu, requested: ")
	}
	p.waitPod(t, ns, "r", 60*time.Second, "the resize Deferred", pending)

	p.Stop()
	p.Start()
	after := p.waitPod(t, ns, "r", 60*time.Second, "Ready and still Deferred after the restart", func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "c")
		return isReady(pod) && cs != nil && cs.State.Running != nil && pending(pod)
	})
	cs := containerStatus(after, "c")
	if cs.ContainerID != id || cs.RestartCount != 0 {
		t.Errorf("after the restart: container %s (was %s), restartCount %d; want the same, 0", cs.ContainerID, id, cs.RestartCount)
	}
	if cs.Resources == nil || !cs.Resources.Limits.Memory().Equal(resourceMust("96Mi")) || !cs.AllocatedResources.Cpu().Equal(resourceMust("200m")) {
		t.Errorf("after the restart: resources %v, allocatedResources %v; want the first resize's", cs.Resources, cs.AllocatedResources)
	}
	if got := p.cgroupMemory(t, ns, "r", "c"); got != "100663296" {
		t.Errorf("memory limit after the restart: %s, want 100663296 (96Mi)", got)
	}
	if got := p.cgroupQuota(t, ns, "r", "c"); got != "20000" {
		t.Errorf("CPU quota after the restart: %s, want 20000 (200m): the deferred resize was carried out", got)
	}

	// The hog leaves: the deferred resize goes through, in place.
	if err := p.Admin.CoreV1().Pods(ns).Delete(context.Background(), "hog", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitPod(t, ns, "r", 90*time.Second, "the deferred resize done once the hog left", func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "c")
		return resizeDone(pod, deferred.Generation) && cs != nil && cs.Resources != nil && cs.Resources.Limits.Cpu().MilliValue() == want
	})
	if got, wantQuota := p.cgroupQuota(t, ns, "r", "c"), fmt.Sprint(want*100); got != wantQuota {
		t.Errorf("CPU quota after the deferred resize: %s, want %s", got, wantQuota)
	}
	evs, err := p.Admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name != "r" {
			continue
		}
		if e.Reason == "ResizeStarted" && e.Count > 2 || e.Reason == "Killing" || e.Reason == "Started" && e.Count > 1 {
			t.Errorf("event %s x%d after the restart: %s", e.Reason, e.Count, e.Message)
		}
	}
}

// resize patches the pod through the resize subresource.
func (p *Podvisor) resize(t *testing.T, ns, name, patch string) *v1.Pod {
	t.Helper()
	pod, err := p.Admin.CoreV1().Pods(ns).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatalf("resize %s: %v", name, err)
	}
	return pod
}

// resizeDone: the agent saw the generation, no resize condition is left
// and the pod is Ready.
func resizeDone(pod *v1.Pod, generation int64) bool {
	return pod.Status.ObservedGeneration >= generation && condition(pod, v1.PodResizePending) == nil &&
		condition(pod, v1.PodResizeInProgress) == nil && isReady(pod)
}

// cgroupValue reads one of a container's cgroup files from inside it (the
// container's script starts with runtimetest.RecordCgroup).
func (p *Podvisor) cgroupValue(t *testing.T, ns, pod, container, controller, v1File, v2File string) string {
	t.Helper()
	var out string
	// The main process records its cgroup as it starts: wait for it.
	Eventually(t, 30*time.Second, "reading "+v1File+" in "+container, func() (bool, error) {
		o, e, code := p.kubectl(t, "", nil, "-n", ns, "exec", pod, "-c", container, "--",
			"sh", "-c", runtimetest.CgroupValue, "sh", controller, v1File, v2File)
		out = strings.TrimSpace(o + e)
		return code == 0, nil
	})
	return out
}

func (p *Podvisor) cgroupMemory(t *testing.T, ns, pod, container string) string {
	return p.cgroupValue(t, ns, pod, container, "memory", "memory.limit_in_bytes", "memory.max")
}

// cgroupQuota is the CFS quota (v2: cpu.max's first field).
func (p *Podvisor) cgroupQuota(t *testing.T, ns, pod, container string) string {
	return strings.Fields(p.cgroupValue(t, ns, pod, container, "cpu", "cpu.cfs_quota_us", "cpu.max"))[0]
}
