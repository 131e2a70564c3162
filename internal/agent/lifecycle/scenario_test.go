package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Scenarios: whole lives of a pod, driven through sim.

// The upstream e2e "Container Runtime blackbox test": a container that exits
// 1, then 0 once restarted.
func TestContainerRuntimeBlackbox(t *testing.T) {
	tests := []struct {
		name         string
		policy       v1.RestartPolicy
		phase        v1.PodPhase
		restartCount int32
		state        string
		done         bool
	}{
		{name: "§2 §4: Always -> restarted after each exit, Running", policy: v1.RestartPolicyAlways,
			phase: v1.PodRunning, restartCount: 2, state: "running"},
		{name: "§2 §4: OnFailure -> restarted after exit 1, Succeeded after exit 0", policy: v1.RestartPolicyOnFailure,
			phase: v1.PodSucceeded, restartCount: 1, state: "terminated:Completed(0)", done: true},
		{name: "§2 §4: Never -> Failed after exit 1, restartCount 0", policy: v1.RestartPolicyNever,
			phase: v1.PodFailed, restartCount: 0, state: "terminated:Error(1)", done: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(t, newPod(containers("c1"), policy(tc.policy)), DefaultConfig())
			m.step()
			m.expectActions("start c1#0")
			m.step()
			if m.phase() != v1.PodRunning || !m.status("c1").Ready {
				t.Fatalf("phase %s ready %v", m.phase(), m.status("c1").Ready)
			}
			m.advance(time.Second)
			m.exit("c1", 1)
			m.step()
			if m.s.Containers["c1"].Current.State == StateRunning {
				m.advance(time.Second)
				m.exit("c1", 0)
				for i := 0; i < 3; i++ { // through the back-off, if any
					m.step()
					if !m.plan.WakeAt.IsZero() {
						m.s.Now = m.plan.WakeAt
					}
				}
			}
			m.step()
			st := m.status("c1")
			if m.phase() != tc.phase || st.RestartCount != tc.restartCount || stateString(st.State) != tc.state || m.plan.Done != tc.done {
				t.Errorf("phase %s restartCount %d state %s done %v; want %s %d %s %v",
					m.phase(), st.RestartCount, stateString(st.State), m.plan.Done, tc.phase, tc.restartCount, tc.state, tc.done)
			}
		})
	}
}

func TestInitFailureNever(t *testing.T) {
	m := newSim(t, newPod(inits("init1", "init2"), containers("c1"), policy(v1.RestartPolicyNever)), DefaultConfig())
	m.step()
	m.expectActions("start init1#0")
	c := condition(t, m.plan, v1.PodInitialized)
	if c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" || c.Message != "containers with incomplete status: [init1 init2]" {
		t.Errorf("§5 Initialized: %+v", c)
	}
	m.exit("init1", 0)
	m.step()
	m.expectActions("start init2#0")
	m.exit("init2", 1)
	m.step()
	m.expectActions("")
	if m.phase() != v1.PodFailed || !m.plan.Done {
		t.Errorf("§2 rule 3: phase %s done %v", m.phase(), m.plan.Done)
	}
	c = condition(t, m.plan, v1.PodInitialized)
	if c.Status != v1.ConditionFalse || c.Message != "containers with incomplete status: [init2]" {
		t.Errorf("§5 Initialized: %+v", c)
	}
	if got := stateString(m.status("c1").State); got != "waiting:PodInitializing" {
		t.Errorf("c1: %s", got)
	}
	if got := stateString(m.status("init2").State); got != "terminated:Error(1)" {
		t.Errorf("init2: %s", got)
	}
}

// §11: a sidecar pod with restartPolicy Never whose main container exits 0
// ends Succeeded, its sidecars stopped in reverse order.
func TestSidecarPodLife(t *testing.T) {
	pod := newPod(sidecars("sc1", "sc2"), inits("init3"), containers("c1", "c2"),
		policy(v1.RestartPolicyNever), modify("sc1", startupProbe))
	m := newSim(t, pod, DefaultConfig())

	m.step()
	m.expectActions("start sc1#0")
	m.step()
	m.expectActions("") // sc1 waits for its startup probe
	if m.phase() != v1.PodPending {
		t.Errorf("§2 rule 2: phase %s", m.phase())
	}
	m.s.Probes["sc1"] = ProbeState{Started: true}
	m.step()
	m.expectActions("start sc2#0")
	m.step()
	m.expectActions("start init3#0")
	m.step()
	m.expectActions("")
	m.exit("init3", 0)
	m.step()
	m.expectActions("start c1#0 start c2#0")
	m.step()
	if m.phase() != v1.PodRunning || condition(t, m.plan, v1.PodInitialized).Status != v1.ConditionTrue ||
		condition(t, m.plan, v1.PodReady).Status != v1.ConditionTrue {
		t.Errorf("phase %s conditions %+v", m.phase(), m.plan.Status.Conditions)
	}

	// A sidecar crash: restarted despite Never, regular containers untouched.
	m.exit("sc2", 1)
	m.step()
	m.expectActions("start sc2#1")
	if m.phase() != v1.PodRunning {
		t.Errorf("§2: phase %s", m.phase())
	}

	m.exit("c1", 0)
	m.step()
	m.expectActions("")
	m.exit("c2", 0)
	m.step()
	m.expectActions("kill sc2(30s)")
	if m.phase() != v1.PodRunning || m.plan.Done {
		t.Errorf("§11: sidecars stopping: phase %s done %v", m.phase(), m.plan.Done)
	}
	m.step()
	m.expectActions("kill sc1(30s)")
	m.step()
	m.expectActions("")
	if m.phase() != v1.PodSucceeded || !m.plan.Done {
		t.Errorf("§11: phase %s done %v, want Succeeded and done", m.phase(), m.plan.Done)
	}
	for _, name := range []string{"sc1", "sc2"} {
		if got := stateString(m.status(name).State); got != "terminated:Error(137)" {
			t.Errorf("%s: %s", name, got)
		}
	}
	if c := condition(t, m.plan, v1.ContainersReady); c.Reason != "PodCompleted" {
		t.Errorf("§5 ContainersReady: %+v", c)
	}
}

// §8: deletion of a running pod with sidecars.
func TestDeletion(t *testing.T) {
	m := newSim(t, newPod(sidecars("sc1", "sc2"), containers("c1", "c2")), DefaultConfig())
	m.step()
	m.expectActions("start sc1#0")
	m.step()
	m.expectActions("start sc2#0")
	m.step()
	m.expectActions("start c1#0 start c2#0")
	m.step()
	m.expectActions("")
	if m.phase() != v1.PodRunning {
		t.Fatalf("phase %s", m.phase())
	}
	m.s.Termination = &Termination{Since: m.s.Now, Grace: 30 * time.Second}
	m.advance(5 * time.Second)
	m.step()
	m.expectActions("kill c1(25s) kill c2(25s)")
	m.step()
	m.expectActions("kill sc2(25s)")
	m.step()
	m.expectActions("kill sc1(25s)")
	m.step()
	m.expectActions("")
	if !m.plan.Done || m.phase() != v1.PodFailed {
		t.Errorf("§8: done %v phase %s", m.plan.Done, m.phase())
	}
	if c := condition(t, m.plan, v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse {
		t.Errorf("§5: PodReadyToStartContainers after teardown: %+v", c)
	}
}

// §6: a container killed for failing its liveness probe is restarted by the
// restart policy.
func TestLivenessKillThenRestart(t *testing.T) {
	m := newSim(t, newPod(containers("c1")), DefaultConfig())
	m.step()
	m.s.Probes["c1"] = ProbeState{Unhealthy: true, KillMessage: "Container c1 failed liveness probe, will be restarted"}
	m.step()
	m.expectActions("kill c1(30s)")
	m.s.Probes["c1"] = ProbeState{}
	m.step()
	m.expectActions("start c1#1")
}
