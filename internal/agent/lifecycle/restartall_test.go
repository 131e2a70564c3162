package lifecycle

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func restartAllOn42(c *v1.Container) {
	if c.RestartPolicy == nil {
		c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
	}
	c.RestartPolicyRules = []v1.ContainerRestartRule{{
		Action:    v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
	}}
}

// settle steps until the plan has no action left (at most n steps).
func (m *sim) settle(n int) {
	m.t.Helper()
	for i := 0; i < n; i++ {
		if len(m.step().Actions) == 0 {
			return
		}
	}
	m.t.Fatalf("no steady state after %d steps: %s", n, actionsString(m.plan.Actions))
}

func (m *sim) restartCounts(names ...string) []int32 {
	var out []int32
	for _, n := range names {
		out = append(out, status(m.t, m.plan, n).RestartCount)
	}
	return out
}

// KEP-5532: an exit matching a RestartAllContainers rule removes every
// container (others first, the source last), publishes AllContainersRestarting
// while it does, then runs init containers again from the first; each
// container counts one restart and shows the removal as its last state.
func TestRestartAllContainersOnExit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		source string
		pod    *v1.Pod
		all    []string
	}{
		{"regular container exit", "source", newPod(policy(v1.RestartPolicyNever), inits("init"), sidecars("sidecar"), containers("source", "regular"), modify("source", restartAllOn42)),
			[]string{"init", "sidecar", "source", "regular"}},
		{"sidecar exit", "source", newPod(policy(v1.RestartPolicyNever), inits("init"), sidecars("sidecar", "source"), containers("regular"), modify("source", restartAllOn42)),
			[]string{"init", "sidecar", "source", "regular"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(t, tc.pod, DefaultConfig())
			m.settle(10)
			m.exit("init", 0)
			m.settle(10)
			if m.phase() != v1.PodRunning {
				t.Fatalf("phase %s before the exit", m.phase())
			}
			m.exit(tc.source, 42)
			p := m.step()
			if c := condition(t, p, v1.AllContainersRestarting); c.Status != v1.ConditionTrue || c.Reason != ReasonRestartAllContainersStarted {
				t.Fatalf("AllContainersRestarting = %+v, want True", c)
			}
			if p.Status.Phase != v1.PodRunning {
				t.Fatalf("phase %s while restarting, want Running", p.Status.Phase)
			}
			var resets []string
			for _, a := range p.Actions {
				if a.Kind != ActionReset {
					t.Fatalf("action %s while restarting all, want only resets", actionsString(p.Actions))
				}
				resets = append(resets, a.Container)
			}
			if len(resets) != len(tc.all) || resets[len(resets)-1] != tc.source {
				t.Fatalf("resets %v: want all %d containers, source last", resets, len(tc.all))
			}
			p = m.step()
			if c := condition(t, p, v1.AllContainersRestarting); c.Status != v1.ConditionFalse {
				t.Fatalf("AllContainersRestarting = %+v after removal, want False", c)
			}
			for _, n := range tc.all {
				st := status(t, p, n)
				if w := st.State.Waiting; w == nil || w.Reason != ReasonRestartingAllContainers || st.RestartCount != 1 ||
					st.LastTerminationState.Terminated == nil || st.LastTerminationState.Terminated.Reason != ReasonRestartingAllContainers {
					t.Fatalf("%s after removal: %s count %d last %s", n, stateString(st.State), st.RestartCount, stateString(st.LastTerminationState))
				}
			}
			if actionsString(p.Actions) != "start init#1" {
				t.Fatalf("first action after removal %s, want the first init container again", actionsString(p.Actions))
			}
			m.settle(10)
			m.exit("init", 0)
			m.settle(10)
			for _, n := range tc.all {
				st := status(t, m.plan, n)
				want := st.State.Running != nil
				if n == "init" {
					want = st.State.Terminated != nil && st.State.Terminated.ExitCode == 0
				}
				if !want || st.RestartCount != 1 || st.LastTerminationState.Terminated == nil {
					t.Fatalf("%s after the restart: %s count %d last %s", n, stateString(st.State), st.RestartCount, stateString(st.LastTerminationState))
				}
			}
			if c := condition(t, m.plan, v1.AllContainersRestarting); c.Status != v1.ConditionFalse {
				t.Fatalf("AllContainersRestarting = %+v at the end", c)
			}
		})
	}
}

// KEP-5532: an init container's exit restarts the init containers; a Never
// policy does not make the pod fail, and a second run exiting 0 initializes it.
func TestRestartAllContainersOnInitExit(t *testing.T) {
	pod := newPod(policy(v1.RestartPolicyNever), sidecars("sidecar"), inits("init", "source"), containers("regular"), modify("source", restartAllOn42))
	// sidecars() and inits() append in call order: sidecar, init, source.
	m := newSim(t, pod, DefaultConfig())
	m.step() // start sidecar
	m.step() // start init
	m.exit("init", 0)
	m.step() // start source
	m.exit("source", 42)
	p := m.step()
	if p.Status.Phase == v1.PodFailed || condition(t, p, v1.AllContainersRestarting).Status != v1.ConditionTrue {
		t.Fatalf("phase %s, restarting %v", p.Status.Phase, condition(t, p, v1.AllContainersRestarting))
	}
	m.step() // removed: sidecar starts again
	m.settle(3)
	m.exit("init", 0)
	m.settle(3)
	m.exit("source", 0)
	m.settle(5)
	if got := m.restartCounts("sidecar", "init", "source"); got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("restart counts %v, want 1 each", got)
	}
	if st := status(t, m.plan, "regular"); st.State.Running == nil || st.RestartCount != 0 {
		t.Fatalf("regular: %s count %d, want running, never restarted", stateString(st.State), st.RestartCount)
	}
	if m.phase() != v1.PodRunning {
		t.Fatalf("phase %s", m.phase())
	}
}

// No loop: once removed, the source no longer shows its exit, so the
// condition goes False and nothing is removed again; a later matching exit
// restarts all again and counts again.
func TestRestartAllContainersNoLoop(t *testing.T) {
	pod := newPod(policy(v1.RestartPolicyNever), containers("source", "regular"), modify("source", restartAllOn42), modify("regular", restartAllOn42))
	m := newSim(t, pod, DefaultConfig())
	m.settle(5)
	m.exit("source", 42)
	m.settle(10)
	for i := 0; i < 5; i++ {
		if p := m.step(); len(p.Actions) != 0 {
			t.Fatalf("actions %s in steady state", actionsString(p.Actions))
		}
	}
	if got := m.restartCounts("source", "regular"); got[0] != 1 || got[1] != 1 {
		t.Fatalf("restart counts %v, want [1 1]", got)
	}
	m.exit("regular", 42)
	m.settle(10)
	if got := m.restartCounts("source", "regular"); got[0] != 2 || got[1] != 2 {
		t.Fatalf("restart counts after a second restart-all %v, want [2 2]", got)
	}
}

// A pod being deleted does not restart anything: the termination wins.
func TestRestartAllContainersNotWhileTerminating(t *testing.T) {
	pod := newPod(policy(v1.RestartPolicyNever), containers("source", "regular"), modify("source", restartAllOn42))
	p := Compute(snap(pod, recs{"source": rec(exited("podvisor://1", 0, 42)), "regular": rec(running("podvisor://2", 0))},
		terminating(Termination{Since: t0, Grace: 30e9})))
	for _, a := range p.Actions {
		if a.Kind == ActionReset {
			t.Fatalf("reset while terminating: %s", actionsString(p.Actions))
		}
	}
}

// KEP-5532: a container whose start failed before any instance existed
// (CreateContainerConfigError) forgets it in the restart too. Kept, it made
// the restarted pod count as initialized (a regular container tried), so
// sidecars and regular containers started at once and the init containers
// never ran again. Found by FuzzCompute.
func TestRestartAllContainersForgetsFailedStarts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pod   *v1.Pod
		first string // the first start after the removal
	}{
		{"init container", newPod(policy(v1.RestartPolicyNever), inits("init"), containers("failed", "source"), modify("source", restartAllOn42)), "start init#1"},
		{"sidecar", newPod(policy(v1.RestartPolicyNever), sidecars("sidecar"), containers("failed", "source"), modify("source", restartAllOn42)), "start sidecar#1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newSim(t, tc.pod, DefaultConfig())
			m.settle(10)
			if tc.first == "start init#1" {
				m.exit("init", 0)
				m.settle(10)
			}
			m.s.Containers["failed"] = ContainerRecord{Waiting: &v1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `configmap "x" not found`}, WaitingSince: m.s.Now}
			m.exit("source", 42)
			p := m.step()
			var reset []string
			for _, a := range p.Actions {
				reset = append(reset, a.Container)
			}
			if !slices.Contains(reset, "failed") {
				t.Fatalf("actions %s: the failed start is not reset", actionsString(p.Actions))
			}
			m.step()
			m.expectActions(tc.first)
			if st := m.status("failed"); st.State.Waiting == nil || st.State.Waiting.Reason == "CreateContainerConfigError" {
				t.Fatalf("failed after the removal: %s, want waiting for the init containers", stateString(st.State))
			}
		})
	}
}

// KEP-5532: a container removed while its status shows it waiting with an
// instance (one the runtime cannot tell the state of, or one created but not
// started when the agent restarted) counts its restart too: its next
// instance takes the attempt after the removed one's, where the core once
// gave it the same attempt again (and so the same log file). Found by
// FuzzCompute. A crash-looping container, which shows its exit while all
// restart, counted already.
func TestRestartAllContainersCountsWaitingInstances(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(m *sim)
	}{
		{"in crash-loop back-off", func(m *sim) {
			m.exit("other", 1)
			m.step() // the first restart is immediate
			m.exit("other", 1)
			m.step()
			if st := m.status("other"); st.State.Waiting == nil || st.State.Waiting.Reason != ReasonCrashLoopBackOff {
				t.Fatalf("other: %s, want CrashLoopBackOff", stateString(st.State))
			}
		}},
		{"in an unknown state", func(m *sim) { m.setState("other", StateUnknown) }},
		{"created, not started", func(m *sim) { m.setState("other", StateCreated) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(policy(v1.RestartPolicyAlways), containers("other", "source"), modify("source", restartAllOn42))
			m := newSim(t, pod, DefaultConfig())
			m.settle(5)
			tc.prepare(m)
			removed := m.s.Containers["other"].Current.Attempt
			m.exit("source", 42)
			m.step() // resets
			m.settle(5)
			st := m.status("other")
			if st.State.Running == nil || st.RestartCount != removed+1 {
				t.Fatalf("other after the restart: %s count %d, want running with count %d", stateString(st.State), st.RestartCount, removed+1)
			}
		})
	}
}

// setState changes the state of name's instance, as the runtime would
// report it, and steps.
func (m *sim) setState(name string, state ContainerState) {
	r := m.s.Containers[name]
	cur := *r.Current
	cur.State = state
	r.Current = &cur
	m.s.Containers[name] = r
	m.step()
}

// KEP-5532: a pod deleted while its containers are being removed stops
// the others instead and, as upstream, keeps showing AllContainersRestarting
// True until it is terminal; the core once turned it False at once.
func TestRestartAllContainersWhileEnding(t *testing.T) {
	pod := newPod(policy(v1.RestartPolicyNever), inits("init"), containers("regular", "source"), modify("source", restartAllOn42))
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.AllContainersRestarting, Status: v1.ConditionTrue, Reason: ReasonRestartAllContainersStarted}}
	deleted := terminating(Termination{Since: t0, Grace: 30e9})
	// init is removed already.
	for _, tc := range []struct {
		name      string
		regular   *Instance
		actions   string
		condition v1.ConditionStatus
		reason    string
	}{
		{"ending: the others stop, the restart still shows", running("2", 0), "kill regular(28s)", v1.ConditionTrue, ReasonRestartAllContainersStarted},
		{"ended: terminal, the condition says so", exited("2", 0, 137), "", v1.ConditionFalse, ReasonPodFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Compute(snap(pod, recs{"regular": rec(tc.regular), "source": rec(exited("3", 0, 42))}, deleted))
			if got := actionsString(p.Actions); got != tc.actions {
				t.Errorf("actions %q, want %q", got, tc.actions)
			}
			if c := condition(t, p, v1.AllContainersRestarting); c.Status != tc.condition || c.Reason != tc.reason {
				t.Errorf("AllContainersRestarting %s/%s, want %s/%s", c.Status, c.Reason, tc.condition, tc.reason)
			}
		})
	}
}
