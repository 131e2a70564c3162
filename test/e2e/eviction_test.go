package e2e

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/agent/eviction"
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
	p.checkPressureEviction(t, hog)

	if c := nodeCondition(t, p, v1.NodePIDPressure); c.Status != v1.ConditionTrue || c.Reason != "KubeletHasInsufficientPID" || c.Message != "kubelet has insufficient PID available" {
		t.Errorf("PIDPressure after the eviction (within the transition period): %+v", c)
	}
	p.waitNodeTaint(t, v1.TaintNodePIDPressure)
	p.expectRefused(t, p.pod(ns, "late", v1.RestartPolicyAlways, sh("c", "sleep 1000")), v1.NodePIDPressure)
	p.expectRunning(t, ns, quiet...)
}

// checkPressureEviction checks what a node-pressure eviction adds to the
// evicted pod: upstream's DisruptionTarget condition with its message, and
// the Evicted event.
func (p *Podvisor) checkPressureEviction(t *testing.T, pod *v1.Pod) {
	t.Helper()
	c := condition(pod, v1.DisruptionTarget)
	if c == nil || c.Status != v1.ConditionTrue || c.Reason != "TerminationByKubelet" || c.Message != pod.Status.Message {
		t.Errorf("%s: DisruptionTarget = %+v", pod.Name, c)
	}
	p.waitEvent(t, pod.Namespace, pod.Name, "Evicted")
}

// waitNodeTaint waits for the node lifecycle controller's key:NoSchedule
// taint, which follows the node's pressure condition.
func (p *Podvisor) waitNodeTaint(t *testing.T, key string) {
	t.Helper()
	Eventually(t, 30*time.Second, "taint "+key+":NoSchedule", func() (bool, error) {
		n, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == key && taint.Effect == v1.TaintEffectNoSchedule {
				return true, nil
			}
		}
		return false, nil
	})
}

// expectRefused binds pod to the node past the scheduler (which sees the
// taint) and expects the agent to refuse it for the condition, with
// upstream's rejectPod message.
func (p *Podvisor) expectRefused(t *testing.T, pod *v1.Pod, cond v1.NodeConditionType) {
	t.Helper()
	pod.Spec.NodeName = p.NodeName
	p.create(t, pod)
	got := p.waitEvicted(t, pod.Namespace, pod.Name, 30*time.Second)
	if want := "Pod was rejected: The node had condition: [" + string(cond) + "]. "; got.Status.Message != want {
		t.Errorf("refused pod %s: message %q, want %q", pod.Name, got.Status.Message, want)
	}
}

// expectRunning checks that the pods still run.
func (p *Podvisor) expectRunning(t *testing.T, ns string, names ...string) {
	t.Helper()
	for _, name := range names {
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

// memoryAvailable is the node's memory.available, measured as the eviction
// manager measures it (capacity less the root cgroup's working set, which
// counts active page cache: it moves with whatever the machine does).
func memoryAvailable(t *testing.T) int64 {
	t.Helper()
	o, ok := eviction.Host{CgroupRoot: "/sys/fs/cgroup"}.Observe()[eviction.MemoryAvailable]
	if !ok {
		t.Fatal("memory.available cannot be measured on this machine")
	}
	return o.Available
}

const mib = 1 << 20

// Node-level eviction with a test-sized memory.available threshold, 3 GiB
// under what the machine has available before podvisor starts (podvisor
// itself takes about 250 MiB of it): a hog pod takes the node 1.5 GiB
// below the threshold; MemoryPressure turns True (with its taint), the hog
// is evicted with upstream's message, naming its container and its use, and
// DisruptionTarget; the quiet pods keep running; while the condition holds
// a new BestEffort pod is refused and a Burstable one admitted (memory
// pressure alone refuses only BestEffort pods, as upstream).
//
// Not parallel, as the PID-pressure test: the signal is the whole machine's
// memory, and other work on the machine took up to 1.5 GiB more of it in
// the dozen seconds between the threshold and the hog in the first runs:
// hence the 3 GiB margin, since a crossing before the hog evicts a quiet pod.
// The hog is sized when it starts, from the headroom left then, so that
// drift since the threshold was set changes neither the crossing nor the
// overshoot. It holds anonymous memory (testserver's hog: busybox's tail,
// which buffered a line that never ends on the process runtime, gives up
// past 2 GiB) until it is killed; podvisor's cleanup kills it if the test
// fails first.
func TestEvictionNodeMemoryPressure(t *testing.T) {
	before := memoryAvailable(t)
	threshold := resource.MustParse(fmt.Sprintf("%dMi", (before-3072*mib)/mib))
	cfg := kubeletConfig(t, fmt.Sprintf("evictionHard:\n  memory.available: %q\nevictionPressureTransitionPeriod: 90s\n", threshold.String()))
	p := NewPodvisor(t, "--config", cfg, "--eviction-monitoring-period", "1s")
	p.Start()
	ns := p.Namespace("evict-memory")

	quietB := p.pod(ns, "quiet-b", v1.RestartPolicyAlways, sh("c", "sleep 1000"))
	quietB.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	p.create(t, p.pod(ns, "quiet-a", v1.RestartPolicyAlways, sh("c", "sleep 1000")))
	p.create(t, quietB)
	quiet := []string{"quiet-a", "quiet-b"}
	for _, name := range quiet {
		p.waitPod(t, ns, name, 60*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	}
	if c := nodeCondition(t, p, v1.NodeMemoryPressure); c.Status != v1.ConditionFalse || c.Reason != "KubeletHasSufficientMemory" {
		t.Fatalf("MemoryPressure before the hog: %+v", c)
	}
	now := memoryAvailable(t)
	headroom := now - threshold.Value()
	t.Logf("memory.available: %d MiB before podvisor, %d MiB with it and the quiet pods; threshold %s", before/mib, now/mib, &threshold)
	if headroom < 256*mib || headroom > 5120*mib {
		t.Fatalf("headroom over the threshold is %d MiB, not within 256 MiB–5 GiB: the machine's memory use moved too much since the threshold was set", headroom/mib)
	}
	hogBytes := headroom + 1536*mib
	p.create(t, p.pod(ns, "hog", v1.RestartPolicyAlways, p.testserver(t, "hog", "hog", strconv.FormatInt(hogBytes, 10))))

	hog := p.waitEvicted(t, ns, "hog", 90*time.Second)
	t.Logf("hog (%d MiB) evicted: %s", hogBytes/mib, hog.Status.Message)
	message := regexp.MustCompile(`^The node was low on resource: memory\. Threshold quantity: ` + regexp.QuoteMeta(threshold.String()) +
		`, available: [0-9]+[KMG]?i?\. Container hog was using ([0-9]+[KMG]?i?), request is 0, has larger consumption of memory\. $`)
	if m := message.FindStringSubmatch(hog.Status.Message); m == nil {
		t.Errorf("hog message %q, want it to match %q", hog.Status.Message, message)
	} else if used := resource.MustParse(m[1]); used.Value() < 128*mib {
		t.Errorf("hog was using %s at its eviction: not its working set, which took the node across the threshold", &used)
	}
	p.checkPressureEviction(t, hog)
	evs, err := p.Admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=hog,reason=Evicted"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if a := e.Annotations; a["offending_containers"] != "hog" || a["starved_resource"] != "memory" || a["offending_containers_usage"] == "" {
			t.Errorf("Evicted event annotations %v, want upstream's naming container hog and memory", a)
		}
	}

	if c := nodeCondition(t, p, v1.NodeMemoryPressure); c.Status != v1.ConditionTrue || c.Reason != "KubeletHasInsufficientMemory" || c.Message != "kubelet has insufficient memory available" {
		t.Errorf("MemoryPressure after the eviction (within the transition period): %+v", c)
	}
	p.waitNodeTaint(t, v1.TaintNodeMemoryPressure)
	p.expectRefused(t, p.pod(ns, "late-besteffort", v1.RestartPolicyAlways, sh("c", "sleep 1000")), v1.NodeMemoryPressure)
	burstable := p.pod(ns, "late-burstable", v1.RestartPolicyAlways, sh("c", "sleep 1000"))
	burstable.Spec.NodeName = p.NodeName
	burstable.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	p.create(t, burstable)
	p.waitPod(t, ns, burstable.Name, 30*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })

	p.expectRunning(t, ns, quiet...)
}
