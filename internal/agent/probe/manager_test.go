package probe

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/expansion"
	"github.com/podvisor/podvisor/internal/runtime"
)

// §6: failureThreshold consecutive failures make the container unhealthy,
// exactly on the third with failureThreshold 3, with an Unhealthy event for
// every failure; then the instance is no longer probed.
func TestLivenessUnhealthyExactlyAtFailureThreshold(t *testing.T) {
	h := newHarness(t)
	h.exec.script("live", results("F"))
	pod := testPod(v1.Container{LivenessProbe: execProbe("live", 1, func(p *v1.Probe) {
		p.TerminationGracePeriodSeconds = ptr.To[int64](5)
	})})
	h.add(pod, "c1")
	if u := h.lastUpdate(); !u.State.Started || u.State.Unhealthy || u.ContainerID != "c1" || u.Container != "app" || u.PodUID != pod.UID {
		t.Fatalf("initial update %+v", u)
	}
	if n := h.exec.count("live"); n != 1 {
		t.Fatalf("runs at start: %d, want 1", n)
	}
	h.step(time.Second)
	if h.exec.count("live") != 2 || h.m.State("c1").Unhealthy {
		t.Fatalf("after 2 failures: runs %d, state %+v", h.exec.count("live"), h.m.State("c1"))
	}
	h.noUpdate()
	h.step(time.Second)
	u := h.lastUpdate()
	if !u.State.Unhealthy || u.State.KillMessage != "Container app failed liveness probe, will be restarted" || u.State.Grace == nil || *u.State.Grace != 5 {
		t.Fatalf("after 3 failures: %+v", u.State)
	}
	ev := h.events()
	if n := countEvents(ev, "Warning Unhealthy Liveness probe failed: fail"); n != 3 {
		t.Errorf("%d Unhealthy events, want 3: %q", n, ev)
	}
	h.step(5 * time.Second)
	if n := h.exec.count("live"); n != 3 {
		t.Errorf("condemned instance probed again: %d runs", n)
	}
}

// §6: a success in between resets the count of consecutive failures.
func TestLivenessFailuresMustBeConsecutive(t *testing.T) {
	h := newHarness(t)
	h.exec.script("live", results("FFSFFS"))
	h.add(testPod(v1.Container{LivenessProbe: execProbe("live", 1)}), "c1")
	for range 6 {
		h.step(time.Second)
	}
	if h.m.State("c1").Unhealthy {
		t.Fatal("unhealthy without 3 consecutive failures")
	}
}

// Grace is nil when the probe sets no terminationGracePeriodSeconds; the kill
// message drops ", will be restarted" when the policy will not restart.
func TestStartupFailureKillsWithoutRestartUnderNever(t *testing.T) {
	h := newHarness(t)
	h.exec.script("start", results("F"))
	pod := testPod(v1.Container{StartupProbe: execProbe("start", 1, func(p *v1.Probe) { p.FailureThreshold = 2 })})
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	h.add(pod, "c1")
	h.noUpdate() // not started, not unhealthy: the zero state
	h.step(time.Second)
	s := h.m.State("c1")
	if !s.Unhealthy || s.Started || s.KillMessage != "Container app failed startup probe" || s.Grace != nil {
		t.Fatalf("state %+v", s)
	}
	if ev := h.events(); countEvents(ev, "Warning Unhealthy Startup probe failed: fail") != 2 {
		t.Errorf("events %q", ev)
	}
}

// §6: no run before initialDelaySeconds after the container started.
func TestInitialDelaySeconds(t *testing.T) {
	h := newHarness(t)
	h.exec.script("ready", results("S"))
	h.add(testPod(v1.Container{ReadinessProbe: execProbe("ready", 1, func(p *v1.Probe) { p.InitialDelaySeconds = 15 })}), "c1")
	h.step(14*time.Second + 999*time.Millisecond)
	if n := h.exec.count("ready"); n != 0 || h.m.State("c1").Ready {
		t.Fatalf("ran %d times before the initial delay", n)
	}
	h.step(time.Millisecond)
	if n := h.exec.count("ready"); n != 1 || !h.m.State("c1").Ready {
		t.Fatalf("runs %d, state %+v at the initial delay", n, h.m.State("c1"))
	}
}

// §6: readiness is Failure until its first success, and flips only after
// successThreshold / failureThreshold consecutive equal results.
func TestReadinessThresholds(t *testing.T) {
	h := newHarness(t)
	h.exec.script("ready", results("FSSSFFFS"))
	h.add(testPod(v1.Container{ReadinessProbe: execProbe("ready", 1, func(p *v1.Probe) { p.SuccessThreshold = 2 })}), "c1")
	want := []bool{false, false, true, true, true, true, false, false}
	for i, w := range want {
		if i > 0 {
			h.step(time.Second)
		}
		if got := h.m.State("c1").Ready; got != w {
			t.Fatalf("after run %d: ready %v, want %v", i+1, got, w)
		}
	}
	// Each flip was reported, and readiness failures are events too.
	if ev := h.events(); countEvents(ev, "Warning Unhealthy Readiness probe failed: fail") != 4 {
		t.Errorf("events %q", ev)
	}
}

// §6: while startup has not succeeded, liveness and readiness do not run and
// the container is not started; once it succeeds it stops, readiness runs at
// once and liveness from its next period.
func TestStartupGatesLivenessAndReadiness(t *testing.T) {
	h := newHarness(t)
	h.exec.script("start", results("FFS"))
	h.exec.script("live", results("S"))
	h.exec.script("ready", results("S"))
	h.add(testPod(v1.Container{
		StartupProbe:   execProbe("start", 1, func(p *v1.Probe) { p.FailureThreshold = 10 }),
		LivenessProbe:  execProbe("live", 3),
		ReadinessProbe: execProbe("ready", 3),
	}), "c1")
	h.step(time.Second)
	if h.exec.count("live")+h.exec.count("ready") != 0 || h.m.State("c1").Started {
		t.Fatalf("gated probes ran: live %d ready %d", h.exec.count("live"), h.exec.count("ready"))
	}
	h.noUpdate()
	h.step(time.Second) // third startup run succeeds
	s := h.m.State("c1")
	if !s.Started || !s.Ready || h.exec.count("ready") != 1 || h.exec.count("live") != 0 {
		t.Fatalf("after startup success: %+v, ready runs %d, live runs %d", s, h.exec.count("ready"), h.exec.count("live"))
	}
	if u := h.lastUpdate(); !u.State.Started || !u.State.Ready {
		t.Fatalf("update %+v", u)
	}
	h.step(3 * time.Second)
	if h.exec.count("start") != 3 || h.exec.count("live") != 1 || h.exec.count("ready") != 2 {
		t.Fatalf("runs: start %d live %d ready %d", h.exec.count("start"), h.exec.count("live"), h.exec.count("ready"))
	}
}

// §6: while the pod is terminating, liveness and startup stop; readiness
// keeps running.
func TestSetTerminatingStopsLivenessButNotReadiness(t *testing.T) {
	h := newHarness(t)
	h.exec.script("live", results("F"))
	h.exec.script("ready", results("SF"))
	pod := testPod(v1.Container{LivenessProbe: execProbe("live", 1), ReadinessProbe: execProbe("ready", 1, func(p *v1.Probe) { p.FailureThreshold = 1 })})
	h.add(pod, "c1")
	h.m.SetTerminating(pod.UID)
	for range 5 {
		h.step(time.Second)
	}
	if n := h.exec.count("live"); n != 1 {
		t.Errorf("liveness ran %d times, want 1 (before terminating)", n)
	}
	s := h.m.State("c1")
	if s.Unhealthy || s.Ready || h.exec.count("ready") != 6 {
		t.Errorf("state %+v, readiness runs %d", s, h.exec.count("ready"))
	}
}

// Upstream ends a startup probe on a success when the pod terminates, so the
// container counts as started and readiness runs during the shutdown.
func TestSetTerminatingEndsStartupQuietly(t *testing.T) {
	h := newHarness(t)
	h.exec.script("start", results("F"))
	h.exec.script("ready", results("S"))
	pod := testPod(v1.Container{StartupProbe: execProbe("start", 1), ReadinessProbe: execProbe("ready", 1)})
	h.add(pod, "c1")
	h.m.SetTerminating(pod.UID)
	h.step(time.Second)
	s := h.m.State("c1")
	if !s.Started || s.Unhealthy || !s.Ready || h.exec.count("start") != 1 {
		t.Fatalf("state %+v, startup runs %d", s, h.exec.count("start"))
	}
	// An instance added to a terminating pod starts without liveness or startup.
	c2 := pod.Spec.Containers[0]
	c2.Name = "second"
	h.m.AddContainer(pod, &c2, "c2", h.clock.Now(), "127.0.0.1", false)
	h.step(time.Second)
	if h.exec.count("start") != 1 || !h.m.State("c2").Started {
		t.Fatalf("second instance: startup runs %d, state %+v", h.exec.count("start"), h.m.State("c2"))
	}
}

// RemoveContainer stops probing; a run in flight is discarded.
func TestRemoveContainerStopsProbing(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	h.exec.block = map[string]chan struct{}{"live": release}
	h.exec.script("live", results("F"))
	pod := testPod(v1.Container{LivenessProbe: execProbe("live", 1, func(p *v1.Probe) { p.FailureThreshold = 1 })})
	h.m.AddContainer(pod, &pod.Spec.Containers[0], "c1", h.clock.Now(), "127.0.0.1", false)
	waitFor(t, func() bool { return h.exec.count("live") == 1 }) // blocked in ExecFunc
	h.m.RemoveContainer("c1")
	close(release)
	h.step(5 * time.Second)
	if n := h.exec.count("live"); n != 1 {
		t.Errorf("runs %d after removal", n)
	}
	for _, u := range h.drainUpdates() {
		if u.State.Unhealthy {
			t.Errorf("update after removal: %+v", u)
		}
	}
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("events of a removed instance: %q", ev)
	}
	if s := h.m.State("c1"); s.Unhealthy || s.Started {
		t.Errorf("state of a removed instance %+v", s)
	}
}

// An older client may send a probe with two mechanisms or none: the probe is
// Unknown with a Warning event, every period, and nothing crashes.
func TestInvalidProbeIsUnknown(t *testing.T) {
	h := newHarness(t)
	two := execProbe("live", 1)
	two.TCPSocket = &v1.TCPSocketAction{Port: intstr.FromInt32(1)}
	none := &v1.Probe{PeriodSeconds: 1}
	h.add(testPod(v1.Container{LivenessProbe: two, ReadinessProbe: none}), "c1")
	h.step(time.Second)
	h.step(time.Second)
	s := h.m.State("c1")
	if s.Unhealthy || s.Ready || !s.Started || h.exec.count("live") != 0 {
		t.Fatalf("state %+v, exec runs %d", s, h.exec.count("live"))
	}
	ev := h.events()
	if countEvents(ev, "Warning Unhealthy Liveness probe errored and resulted in unknown state: invalid probe: exactly one of exec, httpGet, tcpSocket or grpc must be set, found 2 (exec, tcpSocket)") != 3 ||
		countEvents(ev, "Warning Unhealthy Readiness probe errored and resulted in unknown state: invalid probe: exactly one of exec, httpGet, tcpSocket or grpc must be set, found 0") != 3 {
		t.Errorf("events %q", ev)
	}
}

// A command that cannot run is Unknown (no action), retried as upstream,
// with an event; a timed-out one is a Failure (§6).
func TestExecErrors(t *testing.T) {
	h := newHarness(t)
	h.exec.script("nosuch", func(int) ([]byte, int, error) {
		return nil, -1, errors.New(`exec: "nosuch": executable file not found in $PATH`)
	})
	h.exec.script("slow", func(int) ([]byte, int, error) {
		return []byte("partial"), -1, fmt.Errorf("exec in container: %w after 1s", runtime.ErrTimeout)
	})
	pod := testPod(v1.Container{
		LivenessProbe:  execProbe("nosuch", 1, func(p *v1.Probe) { p.FailureThreshold = 1 }),
		ReadinessProbe: execProbe("slow", 1, func(p *v1.Probe) { p.Exec.Command = []string{"slow", "--for", "10s"} }),
	})
	h.add(pod, "c1")
	s := h.m.State("c1")
	if s.Unhealthy || s.Ready {
		t.Fatalf("state %+v", s)
	}
	if n := h.exec.count("nosuch"); n != maxRetries {
		t.Errorf("%d attempts, want %d", n, maxRetries)
	}
	ev := h.events()
	if !hasEvent(ev, `Warning Unhealthy Liveness probe errored and resulted in unknown state: exec: "nosuch": executable file not found in $PATH`) ||
		!hasEvent(ev, `Warning Unhealthy Readiness probe failed: command "slow --for 10s" timed out`) {
		t.Errorf("events %q", ev)
	}
}

// A missing named port is Unknown with a clear event, never a crash.
func TestMissingNamedPortIsUnknown(t *testing.T) {
	h := newHarness(t)
	probe := &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("http")}}, PeriodSeconds: 1}
	h.add(testPod(v1.Container{ReadinessProbe: probe}), "c1")
	if ev := h.events(); !hasEvent(ev, `Warning Unhealthy Readiness probe errored and resulted in unknown state: port "http" not found in the ports of container "app"`) {
		t.Errorf("events %q", ev)
	}
	if h.m.State("c1").Ready {
		t.Error("ready")
	}
}

// A re-adopted instance's first run is spread within one period; a fresh one
// runs at once.
func TestAdoptedContainerFirstRunIsJittered(t *testing.T) {
	h := newHarness(t) // Jitter: half the period
	h.exec.script("ready", results("S"))
	pod := testPod(v1.Container{ReadinessProbe: execProbe("ready", 10)})
	h.m.AddContainer(pod, &pod.Spec.Containers[0], "c1", h.clock.Now().Add(-time.Hour), "127.0.0.1", true)
	h.step(4 * time.Second)
	if n := h.exec.count("ready"); n != 0 {
		t.Fatalf("adopted instance probed at once (%d)", n)
	}
	h.step(time.Second)
	if n := h.exec.count("ready"); n != 1 {
		t.Fatalf("adopted instance not probed within its period (%d)", n)
	}
}

// A pod already being deleted when its instance is added gets no liveness.
func TestAddToDeletedPodSkipsLiveness(t *testing.T) {
	h := newHarness(t)
	pod := testPod(v1.Container{LivenessProbe: execProbe("live", 1)})
	pod.DeletionTimestamp = &metav1.Time{Time: h.clock.Now()}
	h.add(pod, "c1")
	h.step(time.Second)
	if n := h.exec.count("live"); n != 0 {
		t.Fatalf("liveness ran %d times on a terminating pod", n)
	}
}

// Exec probe commands expand $(VAR) from the container's literal env, as upstream.
func TestExecCommandExpandsStaticEnv(t *testing.T) {
	got, err := expandStatic([]string{"check", "$(PORT)", "$(FROM)", "$(MISSING)", "$$(PORT)", "a$b"}, []v1.EnvVar{
		{Name: "PORT", Value: "8080"},
		{Name: "FROM", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
	})
	want := []string{"check", "8080", "", "$(MISSING)", "$(PORT)", "a$b"}
	if fmt.Sprint(got) != fmt.Sprint(want) || err != nil {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
}

// A command whose references multiply past the agent's limits (a 1 KiB
// variable 100000 times in one 400 KB argument) is a probe that cannot run
// as written, found before the 100 MB are built.
func TestExecCommandExpansionBounded(t *testing.T) {
	env := []v1.EnvVar{{Name: "A", Value: strings.Repeat("a", 1024)}}
	if _, err := expandStatic([]string{strings.Repeat("$(A)", 100000)}, env); !errors.Is(err, expansion.ErrTooLong) {
		t.Errorf("one huge argument: %v", err)
	}
	many := make([]string, 20000)
	for i := range many {
		many[i] = "$(A)"
	}
	if _, err := expandStatic(many, env); !errors.Is(err, expansion.ErrTooLong) {
		t.Errorf("many arguments of 1 KiB each, 20 MB in all: %v", err)
	}
}

func TestNewValidatesAndDefaults(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New accepted a config without Exec and Recorder")
	}
	m, err := New(Config{Exec: (&fakeExec{}).run, Recorder: record.NewFakeRecorder(1)})
	if err != nil {
		t.Fatal(err)
	}
	if m.env.userAgent != "kube-probe/1.36" || m.cfg.Workers != defaultWorkers {
		t.Errorf("user agent %q, workers %d", m.env.userAgent, m.cfg.Workers)
	}
}
