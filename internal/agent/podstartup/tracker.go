// Package podstartup measures how long pods take to start, as the
// kubelet's pod startup latency tracker (kubernetes/kubernetes v1.36
// pkg/kubelet/util/pod_startup_latency_tracker.go and the histograms of
// pkg/kubelet/metrics), with the same metric names, help, buckets and
// (no) labels, so that dashboards and SLO rules written for the kubelet
// read the agent's /metrics unchanged:
//
//   - kubelet_pod_start_sli_duration_seconds: from the pod's creation to
//     the moment the agent, after writing a status in which every container
//     runs, sees the pod running on its watch; less the time spent pulling
//     images and running (non-sidecar) init containers; stateful pods (a
//     volume other than secret, configMap, downwardAPI, emptyDir,
//     projected) and pods that were ever unschedulable are left out — the
//     Kubernetes pod startup SLI;
//   - kubelet_pod_start_total_duration_seconds: the same span, nothing
//     subtracted, every pod;
//   - kubelet_first_network_pod_start_sli_duration_seconds: the SLI of the
//     node's first pod not on the host network;
//   - kubelet_pod_start_duration_seconds: from the agent first seeing a
//     pod to the first status it sets with phase Running.
//
// The Tracker takes the facts as the agent meets them (watch, pulls,
// statuses) and the time from an injected clock.
package podstartup

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Buckets are upstream's podStartupDurationBuckets (seconds).
var Buckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}

// Tracker records pods' start-up moments and observes the histograms.
// Safe for concurrent use.
type Tracker struct {
	clock clock.PassiveClock

	mu   sync.Mutex
	pods map[types.UID]*podState
	// excluded pods were unschedulable once: never tracked again, as upstream.
	excluded     map[types.UID]bool
	firstNetwork bool
	// firstSeen and running serve kubelet_pod_start_duration_seconds.
	firstSeen map[types.UID]time.Time

	sli, total, start prometheus.Histogram
	firstNetworkSLI   prometheus.Gauge
}

type podState struct {
	pulls      []pullSession
	pullStarts []time.Time // pulls under way, oldest first
	// runningAt is when the agent's write of the first status in which
	// every container runs returned; zero: not yet.
	runningAt time.Time
	// watched is the first copy of the pod the watch showed running, at
	// watchedAt; nil: none yet.
	watched   *v1.Pod
	watchedAt time.Time
	recorded  bool
}

type pullSession struct{ start, end time.Time }

// New makes a Tracker on clk (nil: the real clock).
func New(clk clock.PassiveClock) *Tracker {
	if clk == nil {
		clk = clock.RealClock{}
	}
	hist := func(name, help string) prometheus.Histogram {
		// "[ALPHA] ": component-base prefixes the help with the stability level.
		return prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "kubelet", Name: name, Help: "[ALPHA] " + help, Buckets: Buckets})
	}
	return &Tracker{
		clock: clk, pods: map[types.UID]*podState{}, excluded: map[types.UID]bool{}, firstSeen: map[types.UID]time.Time{},
		sli: hist("pod_start_sli_duration_seconds",
			"Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch"),
		total: hist("pod_start_total_duration_seconds",
			"Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch"),
		start: hist("pod_start_duration_seconds",
			"Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run"),
		firstNetworkSLI: prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "kubelet", Name: "first_network_pod_start_sli_duration_seconds",
			Help: "[INTERNAL] Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch"}),
	}
}

// Collectors are the metrics to register on the agent's /metrics.
func (t *Tracker) Collectors() []prometheus.Collector {
	return []prometheus.Collector{t.sli, t.total, t.start, t.firstNetworkSLI}
}

// ObservedPodOnWatch is a copy of the pod from the agent's watch. A pod
// seen before it started (no status.startTime) and not unschedulable is
// tracked; the first copy that shows every container running ends the
// measurement, once the agent's write of that status has returned.
func (t *Tracker) ObservedPodOnWatch(pod *v1.Pod) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.firstSeen[pod.UID]; !ok {
		t.firstSeen[pod.UID] = now
	}
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		delete(t.pods, pod.UID)
		return
	}
	st := t.pods[pod.UID]
	if st == nil {
		if t.excluded[pod.UID] || !pod.Status.StartTime.IsZero() {
			return // an agent restart's pods started before: not measured, as upstream
		}
		if unschedulable(pod) {
			t.excluded[pod.UID] = true
			return
		}
		t.pods[pod.UID] = &podState{}
		return
	}
	if unschedulable(pod) {
		delete(t.pods, pod.UID)
		t.excluded[pod.UID] = true
		return
	}
	if st.watched != nil || len(pod.Status.ContainerStatuses) == 0 || !allContainersStarted(pod) {
		return
	}
	// Only the agent writes container states: this copy is its report.
	// The watch may deliver it before the write returns to the agent
	// (a local API server is quick), so whichever comes second records.
	st.watched, st.watchedAt = pod, now
	if !st.runningAt.IsZero() {
		t.record(st)
	}
}

// StatusWritten is a status the API accepted (the pod as it returned it):
// the first in which every container runs marks the pod running.
func (t *Tracker) StatusWritten(pod *v1.Pod) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.pods[pod.UID]
	if st == nil || !st.runningAt.IsZero() || len(pod.Status.ContainerStatuses) == 0 || !allContainersStarted(pod) {
		return
	}
	st.runningAt = now
	if st.watched != nil {
		t.record(st)
	}
}

// record observes the pod's start, ending when the watch showed it running.
func (t *Tracker) record(st *podState) {
	if st.recorded {
		return
	}
	st.recorded = true
	pod := st.watched
	total := st.watchedAt.Sub(pod.CreationTimestamp.Time)
	t.total.Observe(total.Seconds())
	if stateful(pod) {
		return
	}
	sli := total - pullTime(st.pulls) - InitContainersRuntime(pod)
	t.sli.Observe(sli.Seconds())
	if !pod.Spec.HostNetwork && !t.firstNetwork {
		t.firstNetworkSLI.Set(sli.Seconds())
		t.firstNetwork = true
	}
}

// StatusSet is a status the agent set for a pod: the first with phase
// Running observes kubelet_pod_start_duration_seconds.
func (t *Tracker) StatusSet(uid types.UID, phase v1.PodPhase) {
	if phase != v1.PodRunning {
		return
	}
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	seen, ok := t.firstSeen[uid]
	if !ok || seen.IsZero() {
		return
	}
	t.start.Observe(now.Sub(seen).Seconds())
	t.firstSeen[uid] = time.Time{} // observed; the pod stays known
}

// PullStarted and PullFinished bracket a successful image pull for the pod;
// a pull that fails is never finished and subtracts nothing, as upstream.
func (t *Tracker) PullStarted(uid types.UID) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.pods[uid]; st != nil {
		st.pullStarts = append(st.pullStarts, now)
	}
}

// PullFinished ends the pod's oldest pull under way.
func (t *Tracker) PullFinished(uid types.UID) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.pods[uid]; st != nil && len(st.pullStarts) > 0 {
		st.pulls = append(st.pulls, pullSession{start: st.pullStarts[0], end: now})
		st.pullStarts = st.pullStarts[1:]
	}
}

// Forget drops a pod that left the node.
func (t *Tracker) Forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pods, uid)
	delete(t.excluded, uid)
	delete(t.firstSeen, uid)
}

// pullTime is the time spent pulling, overlapping pulls counted once.
// Sessions are in the order they finished, as upstream's.
func pullTime(sessions []pullSession) time.Duration {
	var total time.Duration
	var end time.Time
	for i, s := range sessions {
		switch {
		case i == 0 || s.start.After(end):
			total += s.end.Sub(s.start)
			end = s.end
		case s.end.After(end):
			total += s.end.Sub(end)
			end = s.end
		}
	}
	return total
}

// InitContainersRuntime is how long the pod's init containers (not
// sidecars) ran, from the terminated states of its status. Upstream times
// each run as the kubelet starts it; the status keeps the last run of each,
// to the second.
func InitContainersRuntime(pod *v1.Pod) time.Duration {
	sidecar := map[string]bool{}
	for _, c := range pod.Spec.InitContainers {
		sidecar[c.Name] = c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
	}
	var total time.Duration
	for _, cs := range pod.Status.InitContainerStatuses {
		if term := cs.State.Terminated; term != nil && !sidecar[cs.Name] {
			if d := term.FinishedAt.Sub(term.StartedAt.Time); d > 0 {
				total += d
			}
		}
	}
	return total
}

// allContainersStarted: every container's status is running with a start
// time (upstream's hasPodStartedSLO).
func allContainersStarted(pod *v1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() {
			return false
		}
	}
	return true
}

// stateful: a volume other than the ephemeral kinds, as the SLI defines it.
func stateful(pod *v1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil && v.ConfigMap == nil && v.DownwardAPI == nil && v.EmptyDir == nil && v.Projected == nil {
			return true
		}
	}
	return false
}

// unschedulable: PodScheduled=False at any time excludes the pod.
func unschedulable(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			return true
		}
	}
	return false
}
