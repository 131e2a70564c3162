package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The upstream "Probing container" cases, run in parallel against one podvisor.

func execProbe(cmd ...string) v1.ProbeHandler {
	return v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}
}

func restarts(pod *v1.Pod) int32 {
	if cs := containerStatus(pod, "c"); cs != nil {
		return cs.RestartCount
	}
	return 0
}

// holdsFor checks cond on every poll for d; it fails the test the first time it does not hold.
func (p *Podvisor) holdsFor(t *testing.T, ns, name string, d time.Duration, what string, cond func(*v1.Pod) bool) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		pod := p.waitPod(t, ns, name, 10*time.Second, "pod readable", func(*v1.Pod) bool { return true })
		if !cond(pod) {
			t.Fatalf("%s stopped holding: %s", what, describe(pod))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func TestProbes(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("probes")

	t.Run("readiness initialDelaySeconds 15 is honoured", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "ready-delay", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
		pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: execProbe("true"), InitialDelaySeconds: 15, PeriodSeconds: 1}
		p.create(t, pod)
		got := p.waitPod(t, ns, "ready-delay", 60*time.Second, "Ready", isReady)
		started := containerStatus(got, "c").State.Running.StartedAt.Time
		readyAt := condition(got, v1.PodReady).LastTransitionTime.Time
		if readyAt.Sub(started) < 15*time.Second {
			t.Errorf("Ready %v after start, want >= 15s", readyAt.Sub(started))
		}
		if restarts(got) != 0 {
			t.Errorf("restartCount = %d", restarts(got))
		}
	})

	t.Run("readiness on a closed port never becomes Ready", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "ready-closed", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
		pod.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{
			TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(closedPort(t)))}}, PeriodSeconds: 1}
		p.create(t, pod)
		p.waitPod(t, ns, "ready-closed", 30*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		p.holdsFor(t, ns, "ready-closed", 60*time.Second, "not Ready, no restart", func(pod *v1.Pod) bool {
			return !isReady(pod) && restarts(pod) == 0
		})
	})

	t.Run("exec liveness restarts when the file goes", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		f := filepath.Join(dir, "health")
		pod := p.pod(ns, "live-exec", v1.RestartPolicyAlways, sh("c", fmt.Sprintf("echo ok > '%[1]s'; sleep 10; rm -f '%[1]s'; sleep 600", f)))
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: execProbe("cat", f), InitialDelaySeconds: 5, PeriodSeconds: 2, FailureThreshold: 1}
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "live-exec", 90*time.Second, "a restart", func(pod *v1.Pod) bool { return restarts(pod) >= 1 })
	})

	t.Run("exec liveness that keeps passing never restarts in 4 min", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		f := filepath.Join(dir, "health")
		pod := p.pod(ns, "live-exec-ok", v1.RestartPolicyAlways, sh("c", fmt.Sprintf("echo ok > '%s'; sleep 600", f)))
		// The rule under test is that a passing probe never restarts, not
		// the timeout: 10 s, so that an exec slowed by a loaded machine is
		// not a failure (the 1 s default restarted it under load 30).
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: execProbe("cat", f), InitialDelaySeconds: 5, PeriodSeconds: 2, FailureThreshold: 1, TimeoutSeconds: 10}
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "live-exec-ok", 30*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		p.holdsFor(t, ns, "live-exec-ok", 4*time.Minute, "no restart", func(pod *v1.Pod) bool { return restarts(pod) == 0 })
	})

	t.Run("HTTP liveness against a server that starts failing", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		pod := p.pod(ns, "live-http", v1.RestartPolicyAlways, p.testserver(t, "c", "serve", "--port", strconv.Itoa(port), "--healthz-fail-after", "3"))
		pod.Spec.Containers[0].StartupProbe = listening(port)
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromInt32(int32(port))}}, PeriodSeconds: 1, FailureThreshold: 2}
		p.create(t, pod)
		p.waitPod(t, ns, "live-http", 60*time.Second, "a restart", func(pod *v1.Pod) bool { return restarts(pod) >= 1 })
		// The server logs each request with its User-Agent.
		out, err := p.Admin.CoreV1().Pods(ns).GetLogs("live-http", &v1.PodLogOptions{Container: "c", Previous: true}).DoRaw(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var requests, fromProbe int
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "request GET /healthz ") {
				requests++
				if strings.HasSuffix(line, ` user-agent="kube-probe/1.36"`) {
					fromProbe++
				}
			}
		}
		if requests < 5 || fromProbe != requests {
			t.Errorf("the restarted instance got %d requests for /healthz (want 3 passing and 2 failing), %d from User-Agent kube-probe/1.36 (want all); its log:\n%s", requests, fromProbe, out)
		}
	})

	t.Run("TCP liveness on an open port never restarts", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		pod := p.pod(ns, "live-tcp", v1.RestartPolicyAlways, p.testserver(t, "c", "serve", "--port", strconv.Itoa(port)))
		pod.Spec.Containers[0].StartupProbe = listening(port)
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{
			Port: intstr.FromInt32(int32(port))}}, PeriodSeconds: 1, FailureThreshold: 1}
		p.create(t, pod)
		p.waitPod(t, ns, "live-tcp", 30*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		p.holdsFor(t, ns, "live-tcp", 15*time.Second, "no restart", func(pod *v1.Pod) bool { return restarts(pod) == 0 })
	})

	t.Run("gRPC liveness on a serving port never restarts", func(t *testing.T) {
		t.Parallel()
		grpcPort := freePort(t)
		pod := p.pod(ns, "live-grpc", v1.RestartPolicyAlways, p.testserver(t, "c", "grpc-health", "--port", strconv.Itoa(grpcPort)))
		pod.Spec.Containers[0].StartupProbe = listening(grpcPort)
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(grpcPort)}},
			PeriodSeconds: 1, FailureThreshold: 1}
		p.create(t, pod)
		p.waitPod(t, ns, "live-grpc", 30*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		p.holdsFor(t, ns, "live-grpc", 15*time.Second, "no restart", func(pod *v1.Pod) bool { return restarts(pod) == 0 })
	})
	t.Run("gRPC liveness on a wrong port restarts", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "live-grpc-bad", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(closedPort(t))}},
			PeriodSeconds: 1, FailureThreshold: 1}
		p.create(t, pod)
		p.waitPod(t, ns, "live-grpc-bad", 60*time.Second, "a restart", func(pod *v1.Pod) bool { return restarts(pod) >= 1 })
	})

	t.Run("exec liveness exceeding timeoutSeconds restarts", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "live-timeout", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: execProbe("sleep", "10"), TimeoutSeconds: 1, PeriodSeconds: 2, FailureThreshold: 1}
		p.create(t, pod)
		p.waitPod(t, ns, "live-timeout", 60*time.Second, "a restart", func(pod *v1.Pod) bool { return restarts(pod) >= 1 })
	})

	t.Run("failing startup probe restarts", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "startup-fail", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
		pod.Spec.Containers[0].StartupProbe = &v1.Probe{ProbeHandler: execProbe("false"), PeriodSeconds: 1, FailureThreshold: 3}
		p.create(t, pod)
		got := p.waitPod(t, ns, "startup-fail", 60*time.Second, "a restart", func(pod *v1.Pod) bool { return restarts(pod) >= 1 })
		if cs := containerStatus(got, "c"); cs.Started != nil && *cs.Started {
			t.Errorf("started = true for a container whose startup probe never passed")
		}
	})

	t.Run("startup probe delays liveness; Ready follows startup within a readiness period", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		f := filepath.Join(dir, "started")
		pod := p.pod(ns, "startup-gates", v1.RestartPolicyAlways, sh("c", fmt.Sprintf("sleep 8; touch '%s'; sleep 3600", f)))
		shareHostDirs(pod, dir)
		c := &pod.Spec.Containers[0]
		c.StartupProbe = &v1.Probe{ProbeHandler: execProbe("cat", f), PeriodSeconds: 1, FailureThreshold: 60}
		c.LivenessProbe = &v1.Probe{ProbeHandler: execProbe("cat", f), PeriodSeconds: 1, FailureThreshold: 1}
		c.ReadinessProbe = &v1.Probe{ProbeHandler: execProbe("cat", f), PeriodSeconds: 3}
		p.create(t, pod)
		got := p.waitPod(t, ns, "startup-gates", 60*time.Second, "Ready", isReady)
		if restarts(got) != 0 {
			t.Errorf("liveness ran before startup succeeded: %s", describe(got))
		}
		cs := containerStatus(got, "c")
		if cs.Started == nil || !*cs.Started {
			t.Errorf("started not set: %s", describe(got))
		}
		started := cs.State.Running.StartedAt.Time
		readyAt := condition(got, v1.PodReady).LastTransitionTime.Time
		if d := readyAt.Sub(started); d < 8*time.Second {
			t.Errorf("Ready %v after start, before the startup probe could pass (the file comes after 8 s)", d)
		}
		// From the file's creation (not the container's start: a loaded
		// machine stretches its sleep 8 too): the startup probe passes
		// within its period (1 s), Ready follows within one readiness
		// period (3 s); 1 s of the API's truncation to seconds, 2 s for the
		// two probes' execs.
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if d := readyAt.Sub(fi.ModTime()); d > time.Second+3*time.Second+time.Second+2*time.Second {
			t.Errorf("Ready %v after the startup probe's file appeared, want within a startup and a readiness period", d)
		}
	})

	t.Run("liveness terminationGracePeriodSeconds overrides the pod's", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "live-grace", v1.RestartPolicyAlways, sh("c", "trap '' TERM; while true; do sleep 1; done"))
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](500)
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: execProbe("false"), InitialDelaySeconds: 2, PeriodSeconds: 1,
			FailureThreshold: 1, TerminationGracePeriodSeconds: ptr.To[int64](5)}
		created := time.Now()
		p.create(t, pod)
		got := p.waitPod(t, ns, "live-grace", 60*time.Second, "a restart", func(pod *v1.Pod) bool { return restarts(pod) >= 1 })
		if d := time.Since(created); d > 30*time.Second {
			t.Errorf("restart took %v: the pod's 500 s grace was used instead of the probe's 5 s", d)
		}
		last := containerStatus(got, "c").LastTerminationState.Terminated
		if last == nil || last.ExitCode != 137 {
			t.Errorf("a SIGTERM-ignoring container should end by SIGKILL (137): %s", describe(got))
		}
		if d := last.FinishedAt.Sub(last.StartedAt.Time); d < 5*time.Second {
			t.Errorf("killed %v after start: the 5 s grace was not given", d)
		}
	})
}

// closedPort returns a port nothing listens on.
func closedPort(t *testing.T) int {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := portOf(l)
	l.Close()
	return port
}

// listening is a startup probe that passes once the container listens on
// port: the liveness probe of a server starts after it, not before the
// server could answer.
func listening(port int) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}},
		PeriodSeconds: 1, FailureThreshold: 30}
}
