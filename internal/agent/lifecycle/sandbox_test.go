package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func grace(s int64) podOpt {
	return func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(s) }
}

func (m *sim) events(reason string) int {
	n := 0
	for _, e := range m.log {
		if e.Reason == reason {
			n++
		}
	}
	return n
}

// A sandbox that dies under a running pod: its containers are stopped with
// the pod's grace (sidecars last), one SandboxChanged event is sent, a new
// sandbox is made and the pod runs again from its first init container;
// every container counts the restart.
func TestSandboxDeathRunsThePodAgainInANewSandbox(t *testing.T) {
	m := newSim(t, newPod(grace(5), inits("init"), sidecars("side"), containers("app")), DefaultConfig())
	m.settle(10)
	m.exit("init", 0)
	m.settle(10)
	if m.phase() != v1.PodRunning || m.status("app").State.Running == nil {
		t.Fatalf("phase %s, app %s before the sandbox dies", m.phase(), stateString(m.status("app").State))
	}

	m.sandboxDies()
	m.step()
	m.expectActions("kill app(5s)")
	if n := m.events(EventSandboxChanged); n != 1 {
		t.Fatalf("%d SandboxChanged events, want 1", n)
	}
	if c := condition(t, m.plan, v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse {
		t.Fatalf("PodReadyToStartContainers %s while the sandbox is dead", c.Status)
	}
	m.step()
	m.expectActions("kill side(5s)")
	m.step()
	m.expectActions("sandbox")
	m.step()
	m.expectActions("start init#1")
	if n := m.events(EventSandboxChanged); n != 1 {
		t.Fatalf("%d SandboxChanged events after the new sandbox, want 1", n)
	}
	if got := stateString(m.status("app").State); got != "waiting:PodInitializing" {
		t.Fatalf("app %s while init runs again, want waiting:PodInitializing", got)
	}
	m.step()
	m.expectActions("")
	m.exit("init", 0)
	m.step()
	m.expectActions("start side#1")
	m.step()
	m.expectActions("start app#1")
	m.settle(5)
	if got := m.restartCounts("init", "side", "app"); got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("restart counts %v, want [1 1 1]", got)
	}
	if m.phase() != v1.PodRunning {
		t.Fatalf("phase %s, want Running", m.phase())
	}
}

// What the new sandbox restarts depends on the restart policy, as upstream's
// computePodActions: Never gets no new sandbox and ends with the exits it
// has; OnFailure leaves a container that succeeded; a pod whose regular
// containers are all done gets none either.
func TestSandboxDeathByRestartPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		before func(m *sim) // after the pod runs, before the sandbox dies
		// then: the actions of each step until none is left
		plan    []string
		phase   v1.PodPhase
		changed int // SandboxChanged events
	}{
		{name: "Always: killed and restarted", pod: newPod(grace(3), containers("a", "b")),
			plan: []string{"kill a(3s) kill b(3s)", "sandbox", "start a#1 start b#1"}, phase: v1.PodRunning, changed: 1},
		{name: "OnFailure: a success stays done", pod: newPod(policy(v1.RestartPolicyOnFailure), containers("done", "runs")),
			before: func(m *sim) { m.exit("done", 0); m.step() },
			plan:   []string{"kill runs(30s)", "sandbox", "start runs#1"}, phase: v1.PodRunning, changed: 1},
		{name: "Never: no new sandbox", pod: newPod(policy(v1.RestartPolicyNever), grace(1), containers("a", "b")),
			plan: []string{"kill a(1s) kill b(1s)"}, phase: v1.PodFailed},
		{name: "Never: containers never created end too", pod: newPod(policy(v1.RestartPolicyNever), grace(1), inits("init"), containers("a")),
			plan: []string{"kill init(1s)"}, phase: v1.PodFailed},
		{name: "OnFailure: all succeeded, the pod is done", pod: newPod(policy(v1.RestartPolicyOnFailure), inits("init"), sidecars("side"), containers("a")),
			before: func(m *sim) { m.exit("init", 0); m.settle(5); m.exit("a", 0); m.settle(5) },
			plan:   nil, phase: v1.PodSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(t, tc.pod, DefaultConfig())
			m.settle(10)
			if tc.before != nil {
				tc.before(m)
			}
			m.sandboxDies()
			for i, want := range tc.plan {
				m.step()
				if got := actionsString(m.plan.Actions); got != want {
					t.Fatalf("step %d: actions %q, want %q (plan %q)", i, got, want, tc.plan)
				}
			}
			m.settle(5)
			if m.phase() != tc.phase {
				t.Fatalf("phase %s, want %s", m.phase(), tc.phase)
			}
			if n := m.events(EventSandboxChanged); n != tc.changed {
				t.Fatalf("%d SandboxChanged events, want %d", n, tc.changed)
			}
			if tc.phase != v1.PodRunning && !m.plan.Done {
				t.Fatalf("pod not done in phase %s", tc.phase)
			}
		})
	}
}

// A crash-looping container killed because its sandbox died keeps its
// back-off: the new sandbox does not reset it. Init containers run again at
// once.
func TestSandboxDeathKeepsRegularBackOff(t *testing.T) {
	m := newSim(t, newPod(inits("init"), containers("app")), DefaultConfig())
	m.settle(10)
	m.exit("init", 0)
	m.settle(5)
	m.exit("app", 1)
	m.step()
	m.expectActions("start app#1") // the first restart is at once
	m.step()
	m.exit("app", 1)
	m.step()
	m.expectActions("") // now in back-off (10 s)
	m.sandboxDies()
	m.step()
	m.expectActions("sandbox")
	m.step()
	m.expectActions("start init#1")
	m.exit("init", 0)
	m.step()
	m.expectActions("")
	if got := stateString(m.status("app").State); got != "waiting:CrashLoopBackOff" {
		t.Fatalf("app %s, want waiting:CrashLoopBackOff", got)
	}
	m.advance(10 * time.Second)
	m.step()
	m.expectActions("start app#2")
}
