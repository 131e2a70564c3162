package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
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
	script := runtimetest.RecordCgroup + "; exec sleep 3600"
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

	cgroup := func(container, controller, v1File, v2File string) string {
		t.Helper()
		var out string
		// The main process records its cgroup as it starts: wait for it.
		Eventually(t, 30*time.Second, "reading "+v1File+" in "+container, func() (bool, error) {
			o, e, code := p.kubectl(t, "", nil, "-n", ns, "exec", "resize", "-c", container, "--",
				"sh", "-c", runtimetest.CgroupValue, "sh", controller, v1File, v2File)
			out = strings.TrimSpace(o + e)
			return code == 0, nil
		})
		return out
	}
	memory := func(c string) string { return cgroup(c, "memory", "memory.limit_in_bytes", "memory.max") }
	quota := func(c string) string {
		return strings.Fields(cgroup(c, "cpu", "cpu.cfs_quota_us", "cpu.max"))[0]
	}
	if got := memory("inplace"); got != "134217728" {
		t.Fatalf("memory limit before the resize: %s, want 134217728 (128Mi)", got)
	}
	if got := quota("inplace"); got != "20000" {
		t.Fatalf("CPU quota before the resize: %s, want 20000 (200m)", got)
	}

	patch := `{"spec":{"containers":[
		{"name":"inplace","resources":{"requests":{"cpu":"150m","memory":"64Mi"},"limits":{"cpu":"300m","memory":"192Mi"}}},
		{"name":"restarts","resources":{"requests":{"memory":"96Mi"},"limits":{"memory":"96Mi"}}}]}}`
	resized, err := p.Admin.CoreV1().Pods(ns).Patch(context.Background(), "resize", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatalf("resize: %v", err)
	}
	done := p.waitPod(t, ns, "resize", 60*time.Second, "the resize done", func(pod *v1.Pod) bool {
		if pod.Status.ObservedGeneration < resized.Generation || condition(pod, v1.PodResizePending) != nil ||
			condition(pod, v1.PodResizeInProgress) != nil || !isReady(pod) {
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
}
