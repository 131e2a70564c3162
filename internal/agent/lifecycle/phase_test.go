package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestPhase(t *testing.T) {
	backOff := func(s *Snapshot) {
		// the container crashed twice already: the next restart waits
		s.BackOff = map[string]BackOffEntry{"c1": {Delay: 10 * time.Second, LastUpdate: t0}, "init1": {Delay: 10 * time.Second, LastUpdate: t0}}
	}
	del := terminating(Termination{Since: t0, Grace: 30 * time.Second})
	tests := []struct {
		name   string
		pod    *v1.Pod
		recs   recs
		mods   []func(*Snapshot)
		want   v1.PodPhase
		reason string
	}{
		{name: "§2 rule 4: nothing created yet -> Pending",
			pod: newPod(containers("c1")), want: v1.PodPending},
		{name: "§2 rule 1: init container running -> Pending",
			pod: newPod(inits("init1"), containers("c1")), recs: recs{"init1": rec(running("i1", 0))}, want: v1.PodPending},
		{name: "§2 rule 1: failed init waiting to restart (OnFailure) -> Pending",
			pod:  newPod(inits("init1"), containers("c1"), policy(v1.RestartPolicyOnFailure)),
			recs: recs{"init1": rec(exited("i1", 1, 1))}, mods: []func(*Snapshot){backOff}, want: v1.PodPending},
		{name: "§2 rule 3: failed init + Never -> Failed",
			pod:  newPod(inits("init1"), containers("c1"), policy(v1.RestartPolicyNever)),
			recs: recs{"init1": rec(exited("i1", 0, 1))}, want: v1.PodFailed},
		{name: "§2 rule 3: failed init + Never -> Failed even with a sidecar running",
			pod:  newPod(sidecars("sc"), inits("init1"), containers("c1"), policy(v1.RestartPolicyNever)),
			recs: recs{"sc": rec(running("s", 0)), "init1": rec(exited("i1", 0, 1))}, want: v1.PodFailed},
		{name: "§2 rule 2: sidecar running but not started (startup probe) -> Pending",
			pod:  newPod(sidecars("sc"), containers("c1"), modify("sc", startupProbe)),
			recs: recs{"sc": rec(running("s", 0))}, want: v1.PodPending},
		{name: "§2 rule 2: sidecar started, regular running -> Running",
			pod:  newPod(sidecars("sc"), containers("c1")),
			recs: recs{"sc": rec(running("s", 0)), "c1": rec(running("c", 0))}, want: v1.PodRunning},
		{name: "§2 rule 2: a sidecar restarting after initialization does not make the pod Pending",
			pod:  newPod(sidecars("sc"), containers("c1")),
			recs: recs{"sc": {Current: exited("s", 0, 1), Starting: true}, "c1": rec(running("c", 0))}, want: v1.PodRunning},
		{name: "§2 rule 2: a terminated sidecar never decides the phase",
			pod:  newPod(sidecars("sc"), containers("c1"), policy(v1.RestartPolicyNever)),
			recs: recs{"sc": rec(exited("s", 0, 1)), "c1": rec(exited("c", 0, 0))}, want: v1.PodSucceeded},
		{name: "§2 rule 4: a regular container not created yet -> Pending",
			pod:  newPod(containers("c1", "c2")),
			recs: recs{"c1": rec(running("c", 0))}, want: v1.PodPending},
		{name: "§2 rule 5: regular container running -> Running",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(running("c", 0))}, want: v1.PodRunning},
		{name: "§2 rule 6: Always, all exited 0 -> Running (restarting)",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(exited("c", 0, 0))}, want: v1.PodRunning},
		{name: "§2 rule 6: OnFailure, all exited 0 -> Succeeded",
			pod:  newPod(containers("c1", "c2"), policy(v1.RestartPolicyOnFailure)),
			recs: recs{"c1": rec(exited("a", 0, 0)), "c2": rec(exited("b", 0, 0))}, want: v1.PodSucceeded},
		{name: "§2 rule 6: OnFailure, one failed -> Running (restarting)",
			pod:  newPod(containers("c1", "c2"), policy(v1.RestartPolicyOnFailure)),
			recs: recs{"c1": rec(exited("a", 0, 0)), "c2": rec(exited("b", 0, 1))}, want: v1.PodRunning},
		{name: "§2 rule 6: Never, one failed -> Failed",
			pod:  newPod(containers("c1", "c2"), policy(v1.RestartPolicyNever)),
			recs: recs{"c1": rec(exited("a", 0, 0)), "c2": rec(exited("b", 0, 1))}, want: v1.PodFailed},
		{name: "§2 rule 6: Never, one failed, one still running -> Running",
			pod:  newPod(containers("c1", "c2"), policy(v1.RestartPolicyNever)),
			recs: recs{"c1": rec(running("a", 0)), "c2": rec(exited("b", 0, 1))}, want: v1.PodRunning},
		{name: "§2 rule 6: terminating (deleted), all exited 0 -> Succeeded even with Always",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(exited("c", 0, 0))}, mods: []func(*Snapshot){del}, want: v1.PodSucceeded},
		{name: "§2 rule 6: terminating (deleted), killed by SIGTERM -> Failed",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(exited("c", 0, 143))}, mods: []func(*Snapshot){del}, want: v1.PodFailed},
		{name: "§2 rule 6: terminating (deleted), still running -> Running",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(running("c", 0))}, mods: []func(*Snapshot){del}, want: v1.PodRunning},
		{name: "§8: deleted before anything ran -> Failed once done",
			pod: newPod(containers("c1")), mods: []func(*Snapshot){del}, want: v1.PodFailed},
		{name: "§2 rule 7: published Succeeded never changes",
			pod:  newPod(containers("c1"), published(v1.PodSucceeded, "")),
			recs: recs{"c1": rec(exited("c", 0, 1))}, want: v1.PodSucceeded},
		{name: "§2 rule 7: published Failed never changes, even with a container running",
			pod:  newPod(containers("c1"), published(v1.PodFailed, "Evicted")),
			recs: recs{"c1": rec(running("c", 0))}, want: v1.PodFailed, reason: "Evicted"},
		{name: "§8: eviction of a running pod -> Failed with the termination's reason",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(running("c", 0))},
			mods: []func(*Snapshot){terminating(Termination{Since: t0, Grace: time.Second, Reason: "Evicted", Message: "m"})},
			want: v1.PodFailed, reason: "Evicted"},
		{name: "§10: node shutdown after all exited 0 -> stays Succeeded, reason Terminated",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(exited("c", 0, 0))},
			mods: []func(*Snapshot){terminating(Termination{Since: t0, Grace: time.Second, Reason: "Terminated",
				Message: "Pod was terminated in response to imminent node shutdown."})},
			want: v1.PodSucceeded, reason: "Terminated"},
		{name: "§11 KEP-5307: container restartPolicy Never in an Always pod -> Failed",
			pod: newPod(containers("c1"), modify("c1", func(c *v1.Container) {
				c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
			})),
			recs: recs{"c1": rec(exited("c", 0, 2))}, want: v1.PodFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Compute(snap(tc.pod, tc.recs, tc.mods...))
			if p.Status.Phase != tc.want {
				t.Errorf("phase = %s, want %s", p.Status.Phase, tc.want)
			}
			if p.Status.Reason != tc.reason {
				t.Errorf("reason = %q, want %q", p.Status.Reason, tc.reason)
			}
		})
	}
}
