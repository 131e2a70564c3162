package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMayDelete(t *testing.T) {
	deleting := newPod()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	running := newPod()
	stopped := func(ids ...string) []SandboxRecord {
		var out []SandboxRecord
		for _, id := range ids {
			out = append(out, SandboxRecord{ID: id, Stopped: true})
		}
		return out
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		r    Reclaim
		want bool
	}{
		{"done, its only sandbox stopped", deleting, Reclaim{Done: true, Sandboxes: stopped("a")}, true},
		{"done, every sandbox stopped", deleting, Reclaim{Done: true, Sandboxes: stopped("a", "b")}, true},
		{"done without a sandbox (none was ever made)", deleting, Reclaim{Done: true}, true},
		{"containers still stopping", deleting, Reclaim{Done: false, Sandboxes: stopped("a")}, false},
		{"the sandbox's stop has not returned yet", deleting,
			Reclaim{Done: true, Sandboxes: []SandboxRecord{{ID: "a"}}}, false},
		{"an old sandbox stopped, the newest not", deleting,
			Reclaim{Done: true, Sandboxes: []SandboxRecord{{ID: "a", Stopped: true}, {ID: "b"}}}, false},
		{"an old dead sandbox not stopped (its network may be held)", deleting,
			Reclaim{Done: true, Sandboxes: []SandboxRecord{{ID: "a"}, {ID: "b", Stopped: true}}}, false},
		{"a sandbox being made", deleting, Reclaim{Done: true, Sandboxes: stopped("a"), SandboxCreating: true}, false},
		{"processes left in the pod cgroup", deleting, Reclaim{Done: true, Sandboxes: stopped("a"), ProcessesLeft: true}, false},
		{"a CSI volume still published or staged", deleting, Reclaim{Done: true, Sandboxes: stopped("a"), VolumesMounted: true}, false},
		{"not being deleted: a finished pod stays", running, Reclaim{Done: true, Sandboxes: stopped("a")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MayDelete(tc.pod, tc.r); got != tc.want {
				t.Errorf("MayDelete = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestKillLeftProcesses(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	left := Reclaim{Done: true, Sandboxes: []SandboxRecord{{ID: "a", Stopped: true}}, ProcessesLeft: true}
	tests := []struct {
		name  string
		r     Reclaim
		since time.Time
		want  bool
	}{
		{"left for the grace period", left, now.Add(-LeftProcessesGrace), true},
		{"left for longer", left, now.Add(-time.Minute), true},
		{"left for less: the kernel may still be ending them", left, now.Add(-LeftProcessesGrace + time.Millisecond), false},
		{"first seen now", left, now, false},
		{"never seen before", left, time.Time{}, false},
		{"none left", Reclaim{Done: true, Sandboxes: left.Sandboxes}, now.Add(-time.Minute), false},
		{"a container still running or stopping", Reclaim{Done: false, Sandboxes: left.Sandboxes, ProcessesLeft: true},
			now.Add(-time.Minute), false},
		{"the sandbox's stop has not returned", Reclaim{Done: true, Sandboxes: []SandboxRecord{{ID: "a"}}, ProcessesLeft: true},
			now.Add(-time.Minute), false},
		{"a sandbox being made", Reclaim{Done: true, Sandboxes: left.Sandboxes, SandboxCreating: true, ProcessesLeft: true},
			now.Add(-time.Minute), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := KillLeftProcesses(tc.r, tc.since, now); got != tc.want {
				t.Errorf("KillLeftProcesses = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHoldTerminalPhase(t *testing.T) {
	running := v1.PodStatus{Phase: v1.PodRunning}
	pending := v1.PodStatus{Phase: v1.PodPending, Reason: "R", Message: "M"}
	failed := v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "low on memory"}
	succeeded := v1.PodStatus{Phase: v1.PodSucceeded}
	stopped := Reclaim{Done: true, Sandboxes: []SandboxRecord{{ID: "a", Stopped: true}}}
	sandboxRuns := Reclaim{Done: true, Sandboxes: []SandboxRecord{{ID: "a", Stopped: true}, {ID: "b"}}}
	creating := Reclaim{Done: true, SandboxCreating: true}
	containerStops := Reclaim{Done: false, Sandboxes: []SandboxRecord{{ID: "a", Stopped: true}}}
	for _, tc := range []struct {
		name      string
		api, next v1.PodStatus
		r         Reclaim
		want      v1.PodStatus
	}{
		{"terminal once every sandbox is stopped", running, succeeded, stopped, succeeded},
		{"held while a sandbox is not stopped", running, succeeded, sandboxRuns, running},
		{"held while a sandbox is being made", running, failed, creating, running},
		{"held while a container stops", running, failed, containerStops, running},
		{"held with the API's reason and message", pending, failed, sandboxRuns, pending},
		{"a pod the API shows terminal is not held", failed, failed, sandboxRuns, failed},
		{"not terminal: nothing to hold", pending, running, sandboxRuns, running},
		{"no sandbox at all (rejected, or none made)", pending, failed, Reclaim{Done: true}, failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := HoldTerminalPhase(tc.api, tc.next, tc.r)
			if got.Phase != tc.want.Phase || got.Reason != tc.want.Reason || got.Message != tc.want.Message {
				t.Errorf("phase %s (%q, %q), want %s (%q, %q)", got.Phase, got.Reason, got.Message, tc.want.Phase, tc.want.Reason, tc.want.Message)
			}
		})
	}
}
