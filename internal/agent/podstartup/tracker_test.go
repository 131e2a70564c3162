package podstartup

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pending() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1", CreationTimestamp: metav1.NewTime(t0)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c"}}},
		Status:     v1.PodStatus{Phase: v1.PodPending},
	}
}

func running(p *v1.Pod, at time.Time) *v1.Pod {
	p = p.DeepCopy()
	p.Status.Phase = v1.PodRunning
	p.Status.StartTime = ptr.To(metav1.NewTime(t0))
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}}
	return p
}

// sum is a histogram's sample count and sum.
func sum(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	m := &dto.Metric{}
	if err := h.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// The SLI is creation → running seen on the watch, less the pull time;
// the total keeps the pull; the first network pod's gauge is set once.
func TestSLIExcludesImagePulls(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(time.Second))
	tr := New(clk)
	p := pending()
	tr.ObservedPodOnWatch(p)
	tr.PullStarted(p.UID)
	clk.Step(10 * time.Second)
	tr.PullFinished(p.UID)
	clk.Step(2 * time.Second)
	r := running(p, clk.Now())
	tr.StatusWritten(r)
	if n, _ := sum(t, tr.sli); n != 0 {
		t.Fatalf("observed before the watch showed the pod running")
	}
	clk.Step(time.Second)
	tr.ObservedPodOnWatch(r) // 14 s after creation, 10 of them pulling
	tr.ObservedPodOnWatch(r) // once only
	if n, s := sum(t, tr.sli); n != 1 || s != 4 {
		t.Errorf("SLI: %d samples, sum %v; want 1, 4", n, s)
	}
	if n, s := sum(t, tr.total); n != 1 || s != 14 {
		t.Errorf("total: %d samples, sum %v; want 1, 14", n, s)
	}
	if g := testutil.ToFloat64(tr.firstNetworkSLI); g != 4 {
		t.Errorf("first network pod SLI %v, want 4", g)
	}
}

// The watch may show the running pod before the agent's write returns:
// the measurement ends at the watch, recorded when the write returns.
func TestWatchBeforeWriteReturns(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tr := New(clk)
	p := pending()
	tr.ObservedPodOnWatch(p)
	clk.Step(3 * time.Second)
	r := running(p, clk.Now())
	tr.ObservedPodOnWatch(r)
	if n, _ := sum(t, tr.total); n != 0 {
		t.Fatalf("observed before the agent's write returned")
	}
	clk.Step(time.Second)
	tr.StatusWritten(r)
	if n, s := sum(t, tr.total); n != 1 || s != 3 {
		t.Errorf("total: %d samples, sum %v; want 1, 3", n, s)
	}
}

// A pod whose status has no container states yet has not started.
func TestNoContainerStatusesIsNotStarted(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tr := New(clk)
	p := pending()
	tr.ObservedPodOnWatch(p)
	tr.StatusWritten(p)
	tr.ObservedPodOnWatch(p)
	if n, _ := sum(t, tr.total); n != 0 {
		t.Errorf("a pod without container states counted as started")
	}
}

// A failed pull is never finished: nothing is subtracted for it.
func TestFailedPullNotSubtracted(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tr := New(clk)
	p := pending()
	tr.ObservedPodOnWatch(p)
	tr.PullStarted(p.UID)
	clk.Step(5 * time.Second)
	r := running(p, clk.Now())
	tr.StatusWritten(r)
	tr.ObservedPodOnWatch(r)
	if n, s := sum(t, tr.sli); n != 1 || s != 5 {
		t.Errorf("SLI: %d samples, sum %v; want 1, 5", n, s)
	}
}

func TestPullTimeCountsOverlapsOnce(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name     string
		sessions []pullSession
		want     time.Duration
	}{
		{"none", nil, 0},
		{"disjoint", []pullSession{{at(0), at(2)}, {at(5), at(6)}}, 3 * time.Second},
		{"partial overlap", []pullSession{{at(0), at(4)}, {at(2), at(7)}}, 7 * time.Second},
		{"contained", []pullSession{{at(0), at(10)}, {at(2), at(3)}}, 10 * time.Second},
	} {
		if got := pullTime(tc.sessions); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Stateful pods count in the total, not in the SLI; unschedulable pods
// and pods that had started before the agent saw them count nowhere.
func TestSLIExclusions(t *testing.T) {
	stateful := pending()
	stateful.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "d"}}}}
	unsched := pending()
	unsched.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse}}
	started := running(pending(), t0)
	for _, tc := range []struct {
		name       string
		first      *v1.Pod
		sli, total uint64
	}{
		{"stateful", stateful, 0, 1},
		{"unschedulable", unsched, 0, 0},
		{"started before the agent saw it", started, 0, 0},
	} {
		clk := clocktesting.NewFakeClock(t0.Add(time.Second))
		tr := New(clk)
		tr.ObservedPodOnWatch(tc.first)
		r := running(tc.first, clk.Now())
		tr.StatusWritten(r)
		tr.ObservedPodOnWatch(r)
		if n, _ := sum(t, tr.sli); n != tc.sli {
			t.Errorf("%s: %d SLI samples, want %d", tc.name, n, tc.sli)
		}
		if n, _ := sum(t, tr.total); n != tc.total {
			t.Errorf("%s: %d total samples, want %d", tc.name, n, tc.total)
		}
	}
}

func TestInitContainersRuntimeSkipsSidecars(t *testing.T) {
	p := pending()
	p.Spec.InitContainers = []v1.Container{{Name: "init"}, {Name: "sidecar", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)}}
	term := func(from, to int) v1.ContainerState {
		return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			StartedAt: metav1.NewTime(t0.Add(time.Duration(from) * time.Second)), FinishedAt: metav1.NewTime(t0.Add(time.Duration(to) * time.Second))}}
	}
	p.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "init", State: term(1, 4)}, {Name: "sidecar", State: term(1, 9)}}
	if got := InitContainersRuntime(p); got != 3*time.Second {
		t.Errorf("init runtime %v, want 3s", got)
	}
}

// kubelet_pod_start_duration_seconds: first seen → first status Running.
func TestStartDuration(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tr := New(clk)
	p := pending()
	tr.ObservedPodOnWatch(p)
	clk.Step(3 * time.Second)
	tr.StatusSet(p.UID, v1.PodPending)
	clk.Step(2 * time.Second)
	tr.StatusSet(p.UID, v1.PodRunning)
	tr.StatusSet(p.UID, v1.PodRunning)
	if n, s := sum(t, tr.start); n != 1 || s != 5 {
		t.Errorf("start duration: %d samples, sum %v; want 1, 5", n, s)
	}
}

// The exposition carries upstream's names, help and buckets.
func TestExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	tr := New(clocktesting.NewFakeClock(t0))
	reg.MustRegister(tr.Collectors()...)
	want := `# HELP kubelet_pod_start_sli_duration_seconds [ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch
# TYPE kubelet_pod_start_sli_duration_seconds histogram
`
	var b strings.Builder
	b.WriteString(want)
	for _, le := range []string{"0.5", "1", "2", "3", "4", "5", "6", "8", "10", "20", "30", "45", "60", "120", "180", "240", "300", "360", "480", "600", "900", "1200", "1800", "2700", "3600", "+Inf"} {
		b.WriteString(`kubelet_pod_start_sli_duration_seconds_bucket{le="` + le + `"} 0` + "\n")
	}
	b.WriteString("kubelet_pod_start_sli_duration_seconds_sum 0\nkubelet_pod_start_sli_duration_seconds_count 0\n")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(b.String()), "kubelet_pod_start_sli_duration_seconds"); err != nil {
		t.Error(err)
	}
}
