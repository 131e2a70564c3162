package containergc

import (
	"reflect"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// c is an instance of pod/name in sandbox sb, created at t0+created seconds.
func c(id, pod, name, sb string, state runtime.State, created int) runtime.Status {
	return runtime.Status{ID: id, PodUID: pod, Name: name, SandboxID: sb, State: state, Attempt: int32(created),
		CreatedAt: t0.Add(time.Duration(created) * time.Second)}
}

func sb(id, pod string, state runtime.SandboxState, created int) runtime.SandboxStatus {
	return runtime.SandboxStatus{ID: id, PodUID: pod, State: state, CreatedAt: t0.Add(time.Duration(created) * time.Second)}
}

const (
	running = runtime.StateRunning
	exited  = runtime.StateExited
	created = runtime.StateCreated
	unknown = runtime.StateUnknown
	ready   = runtime.SandboxReady
	dead    = runtime.SandboxNotReady
)

func TestPlan(t *testing.T) {
	now := t0.Add(time.Hour)
	for _, tc := range []struct {
		name       string
		containers []runtime.Status
		sandboxes  []runtime.SandboxStatus
		pods       []string
		policy     Policy
		remove     []string
		stop       []string
		sandboxesR []string
	}{
		{
			name: "crash loop: the newest dead instance stays (lastState, logs --previous), older ones go, oldest first",
			containers: []runtime.Status{
				c("a1", "p", "app", "s1", exited, 1), c("a3", "p", "app", "s1", exited, 3),
				c("a2", "p", "app", "s1", exited, 2), c("a4", "p", "app", "s1", running, 4),
			},
			sandboxes: []runtime.SandboxStatus{sb("s1", "p", ready, 0)},
			pods:      []string{"p"}, policy: DefaultPolicy(),
			remove: []string{"a1", "a2"},
		},
		{
			name: "each container of a pod keeps its own newest dead instance (a done init container stays)",
			containers: []runtime.Status{
				c("i1", "p", "init", "s1", exited, 1),
				c("a1", "p", "app", "s1", exited, 2), c("a2", "p", "app", "s1", exited, 3),
				c("b1", "q", "app", "s2", exited, 1), c("b2", "q", "app", "s2", exited, 2),
			},
			pods: []string{"p", "q"}, policy: DefaultPolicy(),
			remove: []string{"a1", "b1"},
		},
		{
			name: "the newest instance created and not started yet is not counted: the newest dead one stays",
			containers: []runtime.Status{
				c("a1", "p", "app", "s1", exited, 1), c("a2", "p", "app", "s1", exited, 2), c("a3", "p", "app", "s1", created, 3),
			},
			pods: []string{"p"}, policy: DefaultPolicy(),
			remove: []string{"a1"},
		},
		{
			name: "an instance created and never started that is not the newest never starts: it goes",
			containers: []runtime.Status{
				c("a1", "p", "app", "s1", created, 1), c("a2", "p", "app", "s1", exited, 2), c("a3", "p", "app", "s1", running, 3),
			},
			pods: []string{"p"}, policy: DefaultPolicy(),
			remove: []string{"a1"},
		},
		{
			name: "minimum age: an instance created less than MinAge ago is not counted",
			containers: []runtime.Status{
				c("a1", "p", "app", "s1", exited, 1), c("a2", "p", "app", "s1", exited, 3599), c("a3", "p", "app", "s1", exited, 3000),
			},
			pods: []string{"p"}, policy: Policy{MinAge: 2 * time.Second, MaxPerPodContainer: 1, MaxContainers: -1},
			remove: []string{"a1"},
		},
		{
			name: "a pod the node no longer has: every dead instance and every sandbox not ready and empty",
			containers: []runtime.Status{
				c("g1", "gone", "app", "s1", exited, 1), c("g2", "gone", "app", "s2", created, 2), c("g3", "gone", "side", "s3", running, 3),
			},
			sandboxes: []runtime.SandboxStatus{sb("s1", "gone", dead, 1), sb("s2", "gone", dead, 2), sb("s3", "gone", dead, 3), sb("s4", "gone", ready, 4), sb("s5", "gone", dead, 5)},
			policy:    DefaultPolicy(),
			remove:    []string{"g1", "g2"},
			// s3 holds a running instance, s4 is ready.
			sandboxesR: []string{"s1", "s2", "s5"},
		},
		{
			name: "a pod the node has keeps its newest sandbox even dead and empty; older empty dead ones go",
			containers: []runtime.Status{
				c("a1", "p", "app", "s1", exited, 1), c("a2", "p", "app", "s2", exited, 3),
			},
			sandboxes: []runtime.SandboxStatus{sb("s1", "p", dead, 0), sb("s2", "p", dead, 2), sb("s0", "p", dead, -1), sb("s3", "p", dead, 4)},
			pods:      []string{"p"}, policy: DefaultPolicy(),
			remove: []string{"a1"},
			// s1 is emptied by removing a1; s3 is the newest.
			sandboxesR: []string{"s0", "s1"},
		},
		{
			name:       "an instance of unknown state is stopped before it is removed",
			containers: []runtime.Status{c("u1", "p", "app", "s1", unknown, 1), c("a2", "p", "app", "s1", exited, 2)},
			pods:       []string{"p"}, policy: DefaultPolicy(),
			remove: []string{"u1"}, stop: []string{"u1"},
		},
		{
			name: "no per-container limit: nothing goes",
			containers: []runtime.Status{
				c("a1", "p", "app", "s1", exited, 1), c("a2", "p", "app", "s1", exited, 2),
			},
			pods: []string{"p"}, policy: Policy{MaxPerPodContainer: -1, MaxContainers: -1},
		},
		{
			name: "node-wide limit: an equal share per container, then the oldest across the node",
			containers: []runtime.Status{
				c("a1", "p", "app", "s1", exited, 1), c("a2", "p", "app", "s1", exited, 5), c("a3", "p", "app", "s1", exited, 6),
				c("b1", "p", "side", "s1", exited, 2), c("b2", "p", "side", "s1", exited, 3),
				c("c1", "q", "app", "s2", exited, 4),
			},
			pods: []string{"p", "q"}, policy: Policy{MaxPerPodContainer: -1, MaxContainers: 2},
			// Share: max(1, 2/3) = 1 each → a3, b2, c1 left; then the oldest of them (b2) goes.
			remove: []string{"a1", "a2", "b1", "b2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := map[string]bool{}
			for _, p := range tc.pods {
				pods[p] = true
			}
			res := Plan(tc.containers, tc.sandboxes, pods, tc.policy, now)
			var remove, stop []string
			for _, r := range res.Containers {
				remove = append(remove, r.ID)
				if r.Stop {
					stop = append(stop, r.ID)
				}
			}
			if !reflect.DeepEqual(remove, tc.remove) || !reflect.DeepEqual(stop, tc.stop) || !reflect.DeepEqual(res.Sandboxes, tc.sandboxesR) {
				t.Errorf("Plan: remove %v (stop %v), sandboxes %v; want %v (stop %v), %v", remove, stop, res.Sandboxes, tc.remove, tc.stop, tc.sandboxesR)
			}
		})
	}
}
