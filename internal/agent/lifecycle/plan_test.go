package lifecycle

import (
	"math"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestPlanActions(t *testing.T) {
	unhealthy := func(grace *int64) func(*Snapshot) {
		return probes(map[string]ProbeState{"c1": {Unhealthy: true, Grace: grace,
			KillMessage: "Container c1 failed liveness probe, will be restarted"}})
	}
	grace10 := func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10) }
	noSandbox := func(s *Snapshot) { s.SandboxReady = false }
	rules := func(op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) podOpt {
		return modify("c1", func(c *v1.Container) {
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
			c.RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
				ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}}
		})
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		recs recs
		mods []func(*Snapshot)
		want string
	}{
		// Init containers and sidecars (§11).
		{name: "§11: init containers one at a time: the first one first",
			pod: newPod(inits("init1", "init2"), containers("c1")), want: "start init1#0"},
		{name: "§11: init1 running -> nothing else starts",
			pod: newPod(inits("init1", "init2"), containers("c1")), recs: recs{"init1": rec(running("a", 0))}, want: ""},
		{name: "§11: init1 completed -> init2 starts",
			pod: newPod(inits("init1", "init2"), containers("c1")), recs: recs{"init1": rec(exited("a", 0, 0))}, want: "start init2#0"},
		{name: "§11: all init containers completed -> every regular container starts, in spec order, in one plan",
			pod:  newPod(inits("init1"), containers("c1", "c2", "c3")),
			recs: recs{"init1": rec(exited("a", 0, 0))}, want: "start c1#0 start c2#0 start c3#0"},
		{name: "§2 rule 3: failed init with Never -> no more actions",
			pod:  newPod(inits("init1", "init2"), containers("c1"), policy(v1.RestartPolicyNever)),
			recs: recs{"init1": rec(exited("a", 0, 1))}, want: ""},
		{name: "§4: failed init with OnFailure -> restarted (first restart immediate)",
			pod:  newPod(inits("init1", "init2"), containers("c1"), policy(v1.RestartPolicyOnFailure)),
			recs: recs{"init1": rec(exited("a", 0, 1))}, want: "start init1#1"},
		{name: "§4: failed init with Always -> restarted",
			pod:  newPod(inits("init1"), containers("c1")),
			recs: recs{"init1": rec(exited("a", 0, 1))}, want: "start init1#1"},
		{name: "§11: sidecar running but not started (startup probe) -> the next init container waits",
			pod:  newPod(sidecars("sc"), inits("init2"), containers("c1"), modify("sc", startupProbe)),
			recs: recs{"sc": rec(running("s", 0))}, want: ""},
		{name: "§11: sidecar started -> the next init container starts",
			pod:  newPod(sidecars("sc"), inits("init2"), containers("c1"), modify("sc", startupProbe)),
			recs: recs{"sc": rec(running("s", 0))}, mods: []func(*Snapshot){probes(map[string]ProbeState{"sc": {Started: true}})},
			want: "start init2#0"},
		{name: "§11 §7: sidecar postStart not done -> the next init container waits",
			pod:  newPod(sidecars("sc"), inits("init2"), containers("c1")),
			recs: recs{"sc": rec(&Instance{ID: "s", State: StateRunning})}, want: ""},
		{name: "§11: regular containers wait for every sidecar to be started",
			pod:  newPod(sidecars("sc1", "sc2"), containers("c1")),
			recs: recs{"sc1": rec(running("a", 0))}, want: "start sc2#0"},
		{name: "§11: sidecars restart whatever the pod's policy (Never)",
			pod:  newPod(sidecars("sc"), containers("c1"), policy(v1.RestartPolicyNever)),
			recs: recs{"sc": rec(exited("s", 0, 0)), "c1": rec(running("c", 0))}, want: "start sc#1"},
		// Restart policy (§4).
		{name: "§4: Always restarts a container that exited 0",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(exited("c", 0, 0))}, want: "start c1#1"},
		{name: "§4: OnFailure restarts a failed container",
			pod:  newPod(containers("c1"), policy(v1.RestartPolicyOnFailure)),
			recs: recs{"c1": rec(exited("c", 0, 1))}, want: "start c1#1"},
		{name: "§4: OnFailure restarts an OOMKilled container",
			pod:  newPod(containers("c1"), policy(v1.RestartPolicyOnFailure)),
			recs: recs{"c1": rec(&Instance{ID: "c", State: StateExited, ExitCode: 137, Reason: "OOMKilled"})}, want: "start c1#1"},
		{name: "§4: OnFailure does not restart a container that exited 0",
			pod:  newPod(containers("c1", "c2"), policy(v1.RestartPolicyOnFailure)),
			recs: recs{"c1": rec(exited("c", 0, 0)), "c2": rec(running("d", 0))}, want: ""},
		{name: "§4: Never does not restart",
			pod:  newPod(containers("c1", "c2"), policy(v1.RestartPolicyNever)),
			recs: recs{"c1": rec(exited("c", 0, 1)), "c2": rec(running("d", 0))}, want: ""},
		{name: "§11 KEP-5307: container restartPolicy OnFailure overrides the pod's Never",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever), modify("c1", func(c *v1.Container) {
				c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyOnFailure)
			})),
			recs: recs{"c1": rec(exited("c", 0, 3))}, want: "start c1#1"},
		{name: "§11 KEP-5307: rule Restart on exitCodes In [42] matches",
			pod:  newPod(containers("c1"), rules(v1.ContainerRestartRuleOnExitCodesOpIn, 42)),
			recs: recs{"c1": rec(exited("c", 0, 42))}, want: "start c1#1"},
		{name: "§11 KEP-5307: rule In [42] does not match 1 -> container policy Never",
			pod:  newPod(containers("c1", "c2"), rules(v1.ContainerRestartRuleOnExitCodesOpIn, 42)),
			recs: recs{"c1": rec(exited("c", 0, 1)), "c2": rec(running("d", 0))}, want: ""},
		{name: "§11 KEP-5307: rule NotIn [0] restarts on failure",
			pod:  newPod(containers("c1"), rules(v1.ContainerRestartRuleOnExitCodesOpNotIn, 0)),
			recs: recs{"c1": rec(exited("c", 0, 7))}, want: "start c1#1"},
		{name: "§11 KEP-5307: rule NotIn [0] does not restart on success",
			pod:  newPod(containers("c1", "c2"), rules(v1.ContainerRestartRuleOnExitCodesOpNotIn, 0)),
			recs: recs{"c1": rec(exited("c", 0, 0)), "c2": rec(running("d", 0))}, want: ""},
		// Operations in flight.
		{name: "Starting: no new action for the container",
			pod: newPod(containers("c1", "c2")), recs: recs{"c1": {Starting: true}}, want: "start c2#0"},
		{name: "Stopping: no new action for the container",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": {Current: running("c", 0), Stopping: true}},
			mods: []func(*Snapshot){unhealthy(nil)}, want: ""},
		{name: "§4: a crash-looping container does not restart while its back-off runs",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(exited("c", 3, 1))},
			mods: []func(*Snapshot){func(s *Snapshot) {
				s.BackOff = map[string]BackOffEntry{"c1": {Delay: 40 * time.Second, LastUpdate: t0}}
			}},
			want: ""},
		{name: "no sandbox: it is made first, nothing starts",
			pod: newPod(containers("c1", "c2")), mods: []func(*Snapshot){noSandbox}, want: "sandbox"},
		{name: "no sandbox, init containers: it is made first, nothing starts",
			pod: newPod(inits("i1"), containers("c1")), mods: []func(*Snapshot){noSandbox}, want: "sandbox"},
		{name: "sandbox lost, Never pod with its containers done: no new sandbox",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)), recs: recs{"c1": rec(exited("c", 0, 1))},
			mods: []func(*Snapshot){noSandbox}, want: ""},
		{name: "sandbox lost, Always pod: a new sandbox before the restart",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(exited("c", 0, 1))},
			mods: []func(*Snapshot){noSandbox}, want: "sandbox"},
		{name: "sandbox lost while a restart waits in back-off: none until it is due",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(exited("c", 0, 1))},
			mods: []func(*Snapshot){noSandbox, func(s *Snapshot) {
				s.BackOff = map[string]BackOffEntry{"c1": {Delay: 40 * time.Second, LastUpdate: t0}}
			}}, want: ""},
		// Probes (§6).
		{name: "§6: liveness failure -> kill with the probe's grace",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(running("c", 0))},
			mods: []func(*Snapshot){unhealthy(ptr.To[int64](5))}, want: "kill c1(5s)"},
		{name: "§6: liveness failure -> kill with the pod's grace",
			pod: newPod(containers("c1"), grace10), recs: recs{"c1": rec(running("c", 0))},
			mods: []func(*Snapshot){unhealthy(nil)}, want: "kill c1(10s)"},
		{name: "§6: liveness failure -> kill with the default grace of 30s",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(running("c", 0))},
			mods: []func(*Snapshot){unhealthy(nil)}, want: "kill c1(30s)"},
		// Termination (§8).
		{name: "§8: terminating -> kill every regular container with the remaining grace, no start",
			pod:  newPod(sidecars("sc"), containers("c1", "c2", "c3")),
			recs: recs{"sc": rec(running("s", 0)), "c1": rec(running("a", 0)), "c2": rec(running("b", 0))},
			mods: []func(*Snapshot){terminating(Termination{Since: t0, Grace: 30 * time.Second}), at(t0.Add(10 * time.Second))},
			want: "kill c1(20s) kill c2(20s)"},
		{name: "§8: grace used up -> kill with 0 (the worker enforces 2s)",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(running("a", 0))},
			mods: []func(*Snapshot){terminating(Termination{Since: t0, Grace: 30 * time.Second}), at(t0.Add(time.Minute))},
			want: "kill c1(0s)"},
		{name: "§8: terminating -> a running init container is killed too",
			pod:  newPod(inits("init1"), containers("c1")),
			recs: recs{"init1": rec(running("i", 0))},
			mods: []func(*Snapshot){terminating(Termination{Since: t0, Grace: 30 * time.Second}), at(t0)},
			want: "kill init1(30s)"},
		{name: "§8: terminating -> a container being stopped is left alone; sidecars wait",
			pod:  newPod(sidecars("sc"), containers("c1")),
			recs: recs{"sc": rec(running("s", 0)), "c1": {Current: running("a", 0), Stopping: true}},
			mods: []func(*Snapshot){terminating(Termination{Since: t0, Grace: 30 * time.Second})},
			want: ""},
		{name: "§8 step 3: regular containers exited -> the last sidecar is stopped first",
			pod:  newPod(sidecars("sc1", "sc2"), containers("c1")),
			recs: recs{"sc1": rec(running("s1", 0)), "sc2": rec(running("s2", 0)), "c1": rec(exited("a", 0, 143))},
			mods: []func(*Snapshot){terminating(Termination{Since: t0, Grace: 30 * time.Second}), at(t0)},
			want: "kill sc2(30s)"},
		{name: "§8 step 3: the next sidecar only once the one after it has exited",
			pod:  newPod(sidecars("sc1", "sc2"), containers("c1")),
			recs: recs{"sc1": rec(running("s1", 0)), "sc2": {Current: running("s2", 0), Stopping: true}, "c1": rec(exited("a", 0, 143))},
			mods: []func(*Snapshot){terminating(Termination{Since: t0, Grace: 30 * time.Second})},
			want: ""},
		{name: "§8 step 3: last sidecar exited -> the one before it",
			pod:  newPod(sidecars("sc1", "sc2"), containers("c1")),
			recs: recs{"sc1": rec(running("s1", 0)), "sc2": rec(exited("s2", 0, 143)), "c1": rec(exited("a", 0, 143))},
			mods: []func(*Snapshot){terminating(Termination{Since: t0, Grace: 30 * time.Second}), at(t0)},
			want: "kill sc1(30s)"},
		{name: "§11: regular containers done for good (Never) -> sidecars stopped in reverse order, not restarted",
			pod:  newPod(sidecars("sc1", "sc2"), containers("c1"), policy(v1.RestartPolicyNever), grace10),
			recs: recs{"sc1": rec(exited("s1", 0, 1)), "sc2": rec(running("s2", 0)), "c1": rec(exited("a", 0, 0))},
			want: "kill sc2(10s)"},
		// Found by FuzzCompute: the API bounds no grace period, and a plain
		// conversion of a huge one wrapped to -1s, an immediate kill.
		{name: "§6: liveness failure with a grace beyond what a Duration holds -> the largest grace, never negative",
			pod:  newPod(containers("c1"), func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](math.MaxInt64) }),
			recs: recs{"c1": rec(running("c", 0))}, mods: []func(*Snapshot){unhealthy(nil)}, want: "kill c1(2562047h47m16.854775807s)"},
		{name: "§6: probe-level grace beyond what a Duration holds -> the largest grace",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(running("c", 0))},
			mods: []func(*Snapshot){unhealthy(ptr.To[int64](math.MaxInt64/int64(time.Second) + 1))}, want: "kill c1(2562047h47m16.854775807s)"},
		{name: "§2 rule 7: a pod published terminal has what still runs stopped",
			pod:  newPod(containers("c1"), published(v1.PodFailed, "Evicted")),
			recs: recs{"c1": rec(running("a", 0))}, want: "kill c1(30s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Compute(snap(tc.pod, tc.recs, tc.mods...))
			if got := actionsString(p.Actions); got != tc.want {
				t.Errorf("actions = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestKillMessages(t *testing.T) {
	pod := newPod(containers("c1"))
	r := recs{"c1": rec(running("a", 0))}
	p := Compute(snap(pod, r, probes(map[string]ProbeState{"c1": {Unhealthy: true, KillMessage: "Container c1 failed liveness probe, will be restarted"}})))
	if len(p.Actions) != 1 || p.Actions[0].Message != "Container c1 failed liveness probe, will be restarted" || p.Actions[0].Init {
		t.Errorf("§6: %+v", p.Actions)
	}
	p = Compute(snap(pod, r, terminating(Termination{Since: t0, Grace: time.Minute})))
	if len(p.Actions) != 1 || p.Actions[0].Message != "Stopping container c1" {
		t.Errorf("§8: default kill message: %+v", p.Actions)
	}
	p = Compute(snap(pod, r, terminating(Termination{Since: t0, Grace: time.Minute, KillMessage: "shutdown"})))
	if len(p.Actions) != 1 || p.Actions[0].Message != "shutdown" {
		t.Errorf("§8: termination's kill message: %+v", p.Actions)
	}
}

func TestInitFlagAndAttempt(t *testing.T) {
	p := Compute(snap(newPod(sidecars("sc"), containers("c1")), recs{"sc": rec(exited("s", 4, 1))}))
	want := Action{Kind: ActionStart, Container: "sc", Init: true, Attempt: 5}
	if len(p.Actions) != 1 || p.Actions[0] != want {
		t.Errorf("actions = %+v, want %+v", p.Actions, want)
	}
	if e := p.BackOff["sc"]; e.Delay != 10*time.Second || !e.LastUpdate.Equal(t0.Add(2*time.Second)) {
		t.Errorf("§4: back-off after the restart = %+v", e)
	}
}

func TestWaitingRetry(t *testing.T) {
	pod := newPod(containers("c1"))
	r := recs{"c1": {Waiting: &v1.ContainerStateWaiting{Reason: "CreateContainerConfigError"}, WaitingSince: t0}}
	p := Compute(snap(pod, r, at(t0.Add(3*time.Second))))
	if len(p.Actions) != 0 || !p.WakeAt.Equal(t0.Add(10*time.Second)) {
		t.Errorf("retry too early: actions %v, WakeAt %s", actionsString(p.Actions), p.WakeAt.Sub(t0))
	}
	p = Compute(snap(pod, r, at(t0.Add(10*time.Second))))
	if got := actionsString(p.Actions); got != "start c1#0" {
		t.Errorf("retry due: actions %q", got)
	}
	if p.Status.Phase != v1.PodPending || status(t, p, "c1").State.Waiting.Reason != "CreateContainerConfigError" {
		t.Errorf("§3: %s %+v", p.Status.Phase, status(t, p, "c1").State)
	}
}

func TestActiveDeadline(t *testing.T) {
	pod := newPod(sidecars("sc"), containers("c1"), func(p *v1.Pod) {
		p.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
		p.Status.StartTime = ptr.To(apiTime(t0))
	})
	r := recs{"sc": rec(running("s", 0)), "c1": rec(running("a", 0))}

	p := Compute(snap(pod, r, at(t0.Add(30*time.Second))))
	if len(p.Actions) != 0 || !p.WakeAt.Equal(t0.Add(time.Minute)) || p.Status.Phase != v1.PodRunning {
		t.Errorf("§8 before the deadline: actions %q, WakeAt +%s, phase %s", actionsString(p.Actions), p.WakeAt.Sub(t0), p.Status.Phase)
	}

	p = Compute(snap(pod, r, at(t0.Add(time.Minute))))
	if got := actionsString(p.Actions); got != "kill c1(30s)" {
		t.Errorf("§8 deadline: actions %q", got)
	}
	if p.Status.Phase != v1.PodFailed || p.Status.Reason != "DeadlineExceeded" ||
		p.Status.Message != "Pod was active on the node longer than the specified deadline" {
		t.Errorf("§8 deadline: status %s %q %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	want := Event{Type: v1.EventTypeNormal, Reason: "DeadlineExceeded", Message: "Pod was active on the node longer than the specified deadline"}
	if len(p.Events) != 1 || p.Events[0] != want {
		t.Errorf("§8 deadline: events %+v", p.Events)
	}

	// Published: the sidecar is stopped next with what is left of the grace,
	// and the event is not repeated.
	pod.Status = p.Status
	r["c1"] = rec(exited("a", 0, 143))
	p = Compute(snap(pod, r, at(t0.Add(70*time.Second))))
	if got := actionsString(p.Actions); got != "kill sc(20s)" {
		t.Errorf("§8 deadline, sidecar: actions %q", got)
	}
	if len(p.Events) != 0 || p.Status.Reason != "DeadlineExceeded" || p.Status.Phase != v1.PodFailed {
		t.Errorf("§8 deadline, later: events %+v, reason %q", p.Events, p.Status.Reason)
	}
	r["sc"] = rec(exited("s", 0, 143))
	p = Compute(snap(pod, r, at(t0.Add(71*time.Second))))
	if !p.Done || len(p.Actions) != 0 {
		t.Errorf("§8 deadline: done=%v actions %q", p.Done, actionsString(p.Actions))
	}

	// Without a published start time the deadline counts from now.
	pod2 := newPod(containers("c1"), func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr.To[int64](5) })
	p = Compute(snap(pod2, nil, at(t0)))
	if !p.WakeAt.Equal(t0.Add(5*time.Second)) || !p.Status.StartTime.Time.Equal(t0) {
		t.Errorf("§8: WakeAt +%s, startTime %v", p.WakeAt.Sub(t0), p.Status.StartTime)
	}

	// A pod that completed before its deadline keeps its phase and reason.
	pod3 := newPod(containers("c1"), published(v1.PodSucceeded, ""), func(p *v1.Pod) {
		p.Spec.ActiveDeadlineSeconds = ptr.To[int64](5)
		p.Status.StartTime = ptr.To(apiTime(t0))
	})
	p = Compute(snap(pod3, recs{"c1": rec(exited("a", 0, 0))}, at(t0.Add(time.Hour))))
	if p.Status.Phase != v1.PodSucceeded || p.Status.Reason != "" || len(p.Events) != 0 || !p.Done {
		t.Errorf("§2 rule 7: %s %q %+v done=%v", p.Status.Phase, p.Status.Reason, p.Events, p.Done)
	}
}

func TestDone(t *testing.T) {
	del := terminating(Termination{Since: t0, Grace: 30 * time.Second})
	tests := []struct {
		name string
		pod  *v1.Pod
		recs recs
		mods []func(*Snapshot)
		want bool
	}{
		{name: "running pod -> not done", pod: newPod(containers("c1")), recs: recs{"c1": rec(running("a", 0))}},
		{name: "§2 rule 6: Never, exited -> done",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)), recs: recs{"c1": rec(exited("a", 0, 1))}, want: true},
		{name: "§11: main exited, sidecar still running -> not done",
			pod:  newPod(sidecars("sc"), containers("c1"), policy(v1.RestartPolicyNever)),
			recs: recs{"sc": rec(running("s", 0)), "c1": rec(exited("a", 0, 0))}},
		{name: "§8: terminating, a kill in flight -> not done",
			pod: newPod(containers("c1")), recs: recs{"c1": {Current: running("a", 0), Stopping: true}}, mods: []func(*Snapshot){del}},
		{name: "§8: terminating, a start in flight -> not done",
			pod: newPod(containers("c1")), recs: recs{"c1": {Starting: true}}, mods: []func(*Snapshot){del}},
		{name: "§8: terminating, everything exited -> done",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(exited("a", 0, 143))}, mods: []func(*Snapshot){del}, want: true},
		{name: "§8: terminating, created but never started -> not done (it must be removed)",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(&Instance{ID: "x", State: StateCreated})}, mods: []func(*Snapshot){del}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Compute(snap(tc.pod, tc.recs, tc.mods...))
			if p.Done != tc.want {
				t.Errorf("done = %v, want %v (phase %s)", p.Done, tc.want, p.Status.Phase)
			}
			if p.Done && !isTerminal(p.Status.Phase) {
				t.Errorf("done with phase %s", p.Status.Phase)
			}
		})
	}
}

func TestSeconds(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want time.Duration
	}{
		{0, 0}, {-5, 0}, {1, time.Second}, {30, 30 * time.Second},
		{math.MaxInt64 / int64(time.Second), time.Duration(math.MaxInt64/int64(time.Second)) * time.Second},
		{math.MaxInt64/int64(time.Second) + 1, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
	} {
		if got := Seconds(tc.n); got != tc.want {
			t.Errorf("Seconds(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

// A restart held up by the missing sandbox takes no back-off step: the
// step is taken when it really starts, so the delay doubles once, not twice.
func TestNoSandboxTakesNoBackOffStep(t *testing.T) {
	pod := newPod(containers("c1"))
	s := snap(pod, recs{"c1": rec(exited("c", 0, 1))}, func(s *Snapshot) { s.SandboxReady = false })
	p := Compute(s)
	if got := actionsString(p.Actions); got != "sandbox" {
		t.Fatalf("actions = %q, want sandbox", got)
	}
	if e, ok := p.BackOff["c1"]; ok {
		t.Errorf("back-off entry %+v recorded without a start", e)
	}
	s.SandboxReady = true
	p = Compute(s)
	if got := actionsString(p.Actions); got != "start c1#1" {
		t.Fatalf("actions = %q once the sandbox is ready, want start c1#1", got)
	}
	if _, ok := p.BackOff["c1"]; !ok {
		t.Errorf("no back-off entry after the restart")
	}
}
