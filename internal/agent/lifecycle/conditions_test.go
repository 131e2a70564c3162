package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConditions(t *testing.T) {
	gates := func(types ...v1.PodConditionType) podOpt {
		return func(p *v1.Pod) {
			for _, ct := range types {
				p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, v1.PodReadinessGate{ConditionType: ct})
			}
		}
	}
	cond := func(ct v1.PodConditionType, s v1.ConditionStatus) podOpt {
		return func(p *v1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: ct, Status: s})
		}
	}
	runningC1 := recs{"c1": rec(running("a", 0))}
	type want struct {
		ct      v1.PodConditionType
		status  v1.ConditionStatus
		reason  string
		message string
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		recs recs
		mods []func(*Snapshot)
		want want
	}{
		{name: "§5: PodReadyToStartContainers True when the sandbox is ready",
			pod: newPod(containers("c1")), want: want{ct: v1.PodReadyToStartContainers, status: v1.ConditionTrue}},
		{name: "§5: PodReadyToStartContainers False before the sandbox is ready",
			pod: newPod(containers("c1")), mods: []func(*Snapshot){func(s *Snapshot) { s.SandboxReady = false }},
			want: want{ct: v1.PodReadyToStartContainers, status: v1.ConditionFalse}},
		{name: "§5: PodReadyToStartContainers False once the pod is done",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)), recs: recs{"c1": rec(exited("a", 0, 0))},
			want: want{ct: v1.PodReadyToStartContainers, status: v1.ConditionFalse}},
		{name: "§5: Initialized False while init containers are incomplete",
			pod:  newPod(inits("init1", "init2"), containers("c1")),
			want: want{v1.PodInitialized, v1.ConditionFalse, "ContainersNotInitialized", "containers with incomplete status: [init1 init2]"}},
		{name: "§5: Initialized False while a sidecar is not started",
			pod: newPod(sidecars("sc"), containers("c1"), modify("sc", startupProbe)), recs: recs{"sc": rec(running("s", 0))},
			want: want{v1.PodInitialized, v1.ConditionFalse, "ContainersNotInitialized", "containers with incomplete status: [sc]"}},
		{name: "§5: Initialized True once init containers completed",
			pod: newPod(inits("init1"), containers("c1")), recs: recs{"init1": rec(exited("i", 0, 0))},
			want: want{ct: v1.PodInitialized, status: v1.ConditionTrue}},
		{name: "§5: Initialized stays True while a sidecar restarts after initialization",
			pod:  newPod(sidecars("sc"), containers("c1")),
			recs: recs{"sc": rec(exited("s", 0, 1)), "c1": rec(running("a", 0))},
			want: want{ct: v1.PodInitialized, status: v1.ConditionTrue}},
		{name: "§5: Initialized True, PodCompleted when Succeeded",
			pod:  newPod(inits("init1"), containers("c1"), policy(v1.RestartPolicyNever)),
			recs: recs{"init1": rec(exited("i", 0, 0)), "c1": rec(exited("a", 0, 0))},
			want: want{ct: v1.PodInitialized, status: v1.ConditionTrue, reason: "PodCompleted"}},
		{name: "§5: ContainersReady False with the unready containers, sidecars included",
			pod:  newPod(sidecars("sc"), containers("c1", "c2"), modify("sc", readinessProbe)),
			recs: recs{"sc": rec(running("s", 0)), "c1": rec(running("a", 0))},
			want: want{v1.ContainersReady, v1.ConditionFalse, "ContainersNotReady", "containers with unready status: [sc c2]"}},
		{name: "§5: ContainersReady True when all are ready",
			pod: newPod(containers("c1")), recs: runningC1, want: want{ct: v1.ContainersReady, status: v1.ConditionTrue}},
		{name: "§5: ContainersReady PodCompleted once Succeeded",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)), recs: recs{"c1": rec(exited("a", 0, 0))},
			want: want{ct: v1.ContainersReady, status: v1.ConditionFalse, reason: "PodCompleted"}},
		{name: "§5: ContainersReady PodFailed once Failed (upstream 1.36)",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)), recs: recs{"c1": rec(exited("a", 0, 1))},
			want: want{ct: v1.ContainersReady, status: v1.ConditionFalse, reason: "PodFailed"}},
		{name: "§5: Ready as ContainersReady when containers are not ready",
			pod:  newPod(containers("c1"), gates("example.com/lb")),
			want: want{v1.PodReady, v1.ConditionFalse, "ContainersNotReady", "containers with unready status: [c1]"}},
		{name: "§5: Ready as ContainersReady in a terminal phase",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)), recs: recs{"c1": rec(exited("a", 0, 0))},
			want: want{ct: v1.PodReady, status: v1.ConditionFalse, reason: "PodCompleted"}},
		{name: "§5: readiness gate missing counts False",
			pod: newPod(containers("c1"), gates("example.com/lb")), recs: runningC1,
			want: want{v1.PodReady, v1.ConditionFalse, "ReadinessGatesNotReady",
				`corresponding condition of pod readiness gate "example.com/lb" does not exist.`}},
		{name: "§5: readiness gate False",
			pod: newPod(containers("c1"), gates("example.com/lb"), cond("example.com/lb", v1.ConditionFalse)), recs: runningC1,
			want: want{v1.PodReady, v1.ConditionFalse, "ReadinessGatesNotReady",
				`the status of pod readiness gate "example.com/lb" is not "True", but False`}},
		{name: "§5: several readiness gates not ready -> messages joined",
			pod:  newPod(containers("c1"), gates("a.io/x", "b.io/y", "c.io/z"), cond("b.io/y", v1.ConditionUnknown), cond("c.io/z", v1.ConditionTrue)),
			recs: runningC1,
			want: want{v1.PodReady, v1.ConditionFalse, "ReadinessGatesNotReady",
				`corresponding condition of pod readiness gate "a.io/x" does not exist., the status of pod readiness gate "b.io/y" is not "True", but Unknown`}},
		{name: "§5: every readiness gate True -> Ready",
			pod:  newPod(containers("c1"), gates("example.com/lb"), cond("example.com/lb", v1.ConditionTrue)),
			recs: runningC1, want: want{ct: v1.PodReady, status: v1.ConditionTrue}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Compute(snap(tc.pod, tc.recs, tc.mods...))
			c := condition(t, p, tc.want.ct)
			if c.Status != tc.want.status || c.Reason != tc.want.reason || c.Message != tc.want.message {
				t.Errorf("got %s/%s/%q, want %s/%s/%q", c.Status, c.Reason, c.Message, tc.want.status, tc.want.reason, tc.want.message)
			}
		})
	}
}

func TestConditionsOfOthersKept(t *testing.T) {
	old := metav1.NewTime(t0.Add(-time.Hour))
	others := []v1.PodCondition{
		{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "TerminationByKubelet", Message: "m", LastTransitionTime: old},
		{Type: "example.com/custom", Status: v1.ConditionFalse, Reason: "R", LastProbeTime: old, LastTransitionTime: old},
	}
	pod := newPod(containers("c1"), func(p *v1.Pod) { p.Status.Conditions = append(p.Status.Conditions, others...) })
	p := Compute(snap(pod, recs{"c1": rec(running("a", 0))}))
	got := p.Status.Conditions
	if len(got) != len(others)+5 {
		t.Fatalf("§5: conditions %+v", got)
	}
	for i, o := range others {
		if got[i].Type != o.Type || got[i].Status != o.Status || got[i].Reason != o.Reason || got[i].Message != o.Message ||
			!got[i].LastTransitionTime.Equal(&o.LastTransitionTime) || !got[i].LastProbeTime.Equal(&o.LastProbeTime) {
			t.Errorf("§5: condition of another writer changed: %+v, want %+v", got[i], o)
		}
	}
	var types []v1.PodConditionType
	for _, c := range got[len(others):] {
		types = append(types, c.Type)
	}
	want := []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady, v1.PodScheduled}
	for i := range want {
		if types[i] != want[i] {
			t.Errorf("owned conditions appended as %v, want %v", types, want)
			break
		}
	}
}

func TestConditionTransitionTime(t *testing.T) {
	old := metav1.NewTime(t0.Add(-time.Hour))
	pod := newPod(containers("c1"), func(p *v1.Pod) {
		p.Status.Conditions = []v1.PodCondition{
			{Type: v1.PodReady, Status: v1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: old},
			{Type: v1.ContainersReady, Status: v1.ConditionTrue, LastTransitionTime: old},
			{Type: v1.PodInitialized, Status: v1.ConditionTrue, LastTransitionTime: old},
		}
	})
	now := t0.Add(10*time.Second + 300*time.Millisecond)
	p := Compute(snap(pod, recs{"c1": rec(running("a", 0))}, at(now)))
	ready := condition(t, p, v1.PodReady)
	if ready.Status != v1.ConditionTrue || !ready.LastTransitionTime.Equal(ptrTime(metav1.NewTime(t0.Add(10*time.Second)))) {
		t.Errorf("§5: status changed -> lastTransitionTime now (whole seconds): %+v", ready)
	}
	for _, ct := range []v1.PodConditionType{v1.ContainersReady, v1.PodInitialized} {
		if c := condition(t, p, ct); !c.LastTransitionTime.Equal(&old) {
			t.Errorf("§5: %s unchanged -> lastTransitionTime kept: %+v", ct, c)
		}
	}
	// Owned conditions keep their place in the list.
	if p.Status.Conditions[0].Type != v1.PodReady || p.Status.Conditions[1].Type != v1.ContainersReady {
		t.Errorf("order: %+v", p.Status.Conditions)
	}
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

// §5 PodScheduled: once bound, the agent owns PodScheduled as upstream's
// kubelet does: True, in the scheduler's place, its transition time kept,
// and the generation the agent observed.
func TestPodScheduledOwnedOnceBound(t *testing.T) {
	old := metav1.NewTime(t0.Add(-time.Hour))
	pod := newPod(containers("c1"), func(p *v1.Pod) {
		p.Generation = 3
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: old}}
	})
	p := Compute(snap(pod, recs{"c1": rec(running("a", 0))}))
	c := p.Status.Conditions[0]
	if c.Type != v1.PodScheduled || c.Status != v1.ConditionTrue || c.ObservedGeneration != 3 || !c.LastTransitionTime.Equal(&old) {
		t.Errorf("scheduler's PodScheduled -> True, generation 3, time kept, in place: %+v", c)
	}

	// Unschedulable before a direct binding: True now, the scheduler's reason gone.
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes", LastTransitionTime: old}}
	c = condition(t, Compute(snap(pod, nil)), v1.PodScheduled)
	if c.Status != v1.ConditionTrue || c.Reason != "" || c.Message != "" || !c.LastTransitionTime.Equal(ptrTime(metav1.NewTime(t0.Add(2*time.Second)))) {
		t.Errorf("Unschedulable then bound -> True, no reason, transition now: %+v", c)
	}

	// Created with spec.nodeName: the scheduler never wrote it; the agent adds it.
	pod.Status.Conditions = nil
	p = Compute(snap(pod, nil))
	last := p.Status.Conditions[len(p.Status.Conditions)-1]
	if last.Type != v1.PodScheduled || last.Status != v1.ConditionTrue || last.ObservedGeneration != 3 {
		t.Errorf("pod bound by spec.nodeName -> PodScheduled True appended: %+v", p.Status.Conditions)
	}
}

// Every condition the agent writes, and the status, carry the generation the
// agent observed (upstream's PodObservedGenerationTracking, GA in 1.35); a
// new generation moves them all, conditions of other writers excepted.
func TestObservedGenerationOnEveryOwnedCondition(t *testing.T) {
	other := v1.PodCondition{Type: "example.com/gate", Status: v1.ConditionTrue, ObservedGeneration: 1}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		recs recs
		mods []func(*Snapshot)
	}{
		{name: "running", pod: newPod(containers("c1")), recs: recs{"c1": rec(running("a", 0))}},
		{name: "initializing", pod: newPod(inits("i1"), containers("c1")), recs: recs{"i1": rec(running("i", 0))}},
		{name: "ended", pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)), recs: recs{"c1": rec(exited("a", 0, 1))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pod.Generation = 7
			tc.pod.Status.Conditions = []v1.PodCondition{other}
			p := Compute(snap(tc.pod, tc.recs, tc.mods...))
			if p.Status.ObservedGeneration != 7 {
				t.Errorf("status.observedGeneration = %d, want 7", p.Status.ObservedGeneration)
			}
			seen := 0
			for _, c := range p.Status.Conditions {
				switch {
				case c.Type == other.Type:
					if c.ObservedGeneration != 1 {
						t.Errorf("another writer's condition changed: %+v", c)
					}
				case c.ObservedGeneration != 7:
					t.Errorf("%s observedGeneration = %d, want 7", c.Type, c.ObservedGeneration)
				default:
					seen++
				}
			}
			if seen != len(ownedConditions) {
				t.Errorf("owned conditions with the generation: %d, want %d: %+v", seen, len(ownedConditions), p.Status.Conditions)
			}
		})
	}
}
