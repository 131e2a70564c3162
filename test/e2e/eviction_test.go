package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// evicted waits for a pod to end Failed/Evicted and returns it.
func (p *Podvisor) waitEvicted(t *testing.T, ns, name string, timeout time.Duration) *v1.Pod {
	t.Helper()
	return p.waitPod(t, ns, name, timeout, "Failed/Evicted", func(pod *v1.Pod) bool {
		return pod.Status.Phase == v1.PodFailed && pod.Status.Reason == "Evicted"
	})
}

// Per-pod local storage limits (LocalStorageCapacityIsolation, on by default
// upstream): an emptyDir over its sizeLimit and a container over its
// ephemeral-storage limit evict their pod with upstream's messages; a pod
// within its limits keeps running.
func TestEvictionLocalStorageLimits(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t, "--eviction-monitoring-period", "1s")
	p.Start()
	ns := p.Namespace("evict-storage")

	bystander := p.create(t, p.pod(ns, "bystander", v1.RestartPolicyAlways, sh("c", "head -c 1048576 /dev/zero > f; sleep 1000")))

	mib := resource.MustParse("1Mi")
	mount := "/tmp/podvisor-e2e-evict-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { os.Remove(mount) })
	ed := p.pod(ns, "emptydir", v1.RestartPolicyAlways, sh("c", "head -c 2097152 /dev/zero > "+mount+"/f; sleep 1000"))
	ed.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "x", MountPath: mount}}
	ed.Spec.Volumes = []v1.Volume{{Name: "x", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &mib}}}}
	p.create(t, ed)

	// Two containers with limits: the pod's total (101Mi) is not exceeded,
	// container c's own 1Mi is (it writes 2Mi in its working directory).
	ct := p.pod(ns, "container", v1.RestartPolicyAlways,
		sh("a", "sleep 1000"), sh("c", "head -c 2097152 /dev/zero > big; sleep 1000"))
	ct.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("100Mi")}
	ct.Spec.Containers[1].Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: mib}
	p.create(t, ct)

	for name, want := range map[string]string{
		"emptydir":  `Usage of EmptyDir volume "x" exceeds the limit "1Mi". `,
		"container": `Container c exceeded its local ephemeral storage limit "1Mi". `,
	} {
		pod := p.waitEvicted(t, ns, name, 60*time.Second)
		if pod.Status.Message != want {
			t.Errorf("%s: message %q, want %q", name, pod.Status.Message, want)
		}
		// Upstream adds no DisruptionTarget condition to local storage evictions.
		if c := condition(pod, v1.DisruptionTarget); c != nil {
			t.Errorf("%s: unexpected condition %+v", name, c)
		}
		p.waitEvent(t, ns, name, "Evicted")
	}
	pod := p.waitPod(t, ns, bystander.Name, 10*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	if pod.Status.Reason != "" {
		t.Errorf("bystander: reason %q", pod.Status.Reason)
	}
}

// pidAvailable is the node's pid.available as the kubelet computes it.
func pidAvailable(t *testing.T) int64 {
	t.Helper()
	maxPID := int64(-1)
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if maxPID < 0 || n < maxPID {
			maxPID = n
		}
	}
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	_, tasks, _ := strings.Cut(strings.Fields(string(b))[3], "/")
	n, _ := strconv.ParseInt(tasks, 10, 64)
	return maxPID - n
}

// Node-level eviction with a test-sized pid.available threshold: a pod that
// starts 3000 processes takes the node under it; PIDPressure turns True
// (with its taint, from the node lifecycle controller), the pod with the
// most processes is evicted with upstream's message and DisruptionTarget,
// the others keep running, and a new pod is refused while the condition
// holds (any pod under PID pressure, as upstream).
//
// Not parallel: the signal is the whole machine's task count, which other
// tests' podvisors and pods move by hundreds (a parallel run once crossed
// the threshold before the hog started). Alone, this podvisor (a few hundred
// threads) and the quiet pods stay well inside the 1500-task margin.
func TestEvictionNodePIDPressure(t *testing.T) {
	threshold := pidAvailable(t) - 1500
	cfg := kubeletConfig(t, fmt.Sprintf("evictionHard:\n  pid.available: \"%d\"\nevictionPressureTransitionPeriod: 90s\n", threshold))
	p := NewPodvisor(t, "--config", cfg, "--eviction-monitoring-period", "1s")
	p.Start()
	ns := p.Namespace("evict-pids")

	quiet := []string{"quiet-a", "quiet-b"}
	for _, name := range quiet {
		p.create(t, p.pod(ns, name, v1.RestartPolicyAlways, sh("c", "sleep 1000")))
	}
	for _, name := range quiet {
		p.waitPod(t, ns, name, 60*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	}
	if c := nodeCondition(t, p, v1.NodePIDPressure); c.Status != v1.ConditionFalse || c.Reason != "KubeletHasSufficientPID" {
		t.Fatalf("PIDPressure before the hog: %+v", c)
	}

	p.create(t, p.pod(ns, "hog", v1.RestartPolicyAlways, sh("c", "for i in $(seq 3000); do sleep 1000 & done; wait")))
	hog := p.waitEvicted(t, ns, "hog", 90*time.Second)
	prefix := fmt.Sprintf("The node was low on resource: pids. Threshold quantity: %s, available: ", resource.NewQuantity(threshold, resource.DecimalSI))
	if !strings.HasPrefix(hog.Status.Message, prefix) {
		t.Errorf("hog message %q, want prefix %q", hog.Status.Message, prefix)
	}
	c := condition(hog, v1.DisruptionTarget)
	if c == nil || c.Status != v1.ConditionTrue || c.Reason != "TerminationByKubelet" || c.Message != hog.Status.Message {
		t.Errorf("hog DisruptionTarget = %+v", c)
	}
	p.waitEvent(t, ns, "hog", "Evicted")

	if c := nodeCondition(t, p, v1.NodePIDPressure); c.Status != v1.ConditionTrue || c.Reason != "KubeletHasInsufficientPID" || c.Message != "kubelet has insufficient PID available" {
		t.Errorf("PIDPressure after the eviction (within the transition period): %+v", c)
	}
	Eventually(t, 30*time.Second, "taint node.kubernetes.io/pid-pressure:NoSchedule", func() (bool, error) {
		n, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == v1.TaintNodePIDPressure && taint.Effect == v1.TaintEffectNoSchedule {
				return true, nil
			}
		}
		return false, nil
	})

	// Bound past the scheduler, which sees the taint.
	late := p.pod(ns, "late", v1.RestartPolicyAlways, sh("c", "sleep 1000"))
	late.Spec.NodeName = p.NodeName
	p.create(t, late)
	got := p.waitEvicted(t, ns, "late", 30*time.Second)
	if want := "Pod was rejected: The node had condition: [PIDPressure]. "; got.Status.Message != want { // upstream's rejectPod prefix
		t.Errorf("refused pod message %q, want %q", got.Status.Message, want)
	}

	for _, name := range quiet {
		pod, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase != v1.PodRunning {
			t.Errorf("%s: %s", name, describe(pod))
		}
	}
}

func nodeCondition(t *testing.T, p *Podvisor, ct v1.NodeConditionType) v1.NodeCondition {
	t.Helper()
	n, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == ct {
			return c
		}
	}
	t.Fatalf("node has no %s condition", ct)
	return v1.NodeCondition{}
}
