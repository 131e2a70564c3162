package e2e

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The crash test's checker must catch each way a restart went wrong in
// issue 18; fed the statuses those restarts produced, it reports them.
func TestCrashCheckerCatchesWhatIssue18Saw(t *testing.T) {
	finished := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	status := func(id string, count int32, state v1.ContainerState, last *v1.ContainerStateTerminated) *v1.Pod {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}}
		cs := v1.ContainerStatus{Name: "c", ContainerID: id, RestartCount: count, State: state}
		if last != nil {
			cs.LastTerminationState.Terminated = last
		}
		pod.Status.ContainerStatuses = []v1.ContainerStatus{cs}
		return pod
	}
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	exit := func(id string, code int32, reason string) *v1.ContainerStateTerminated {
		return &v1.ContainerStateTerminated{ContainerID: id, ExitCode: code, Reason: reason, FinishedAt: finished}
	}
	for _, tc := range []struct {
		name  string
		pods  []*v1.Pod
		want  string
		alive []int // processes of the pod when it leaves the API
		// leaves: the pod leaves the API (after the test deleted it, unless
		// unasked)
		leaves, unasked bool
	}{
		{name: "restart count went down", want: "restartCount went down",
			pods: []*v1.Pod{status("x://4", 4, running, nil), status("x://0", 0, running, nil)}},
		{name: "running container replaced without a restart counted", want: "replaced without a restart counted",
			pods: []*v1.Pod{status("x://a", 2, running, nil), status("x://b", 2, running, nil)}},
		{name: "last state replaced by another exit", want: "recorded exit",
			pods: []*v1.Pod{
				status("x://2", 2, running, exit("x://1", 1, "Error")),
				status("x://2", 2, running, exit("x://1", 137, "Error")),
			}},
		{name: "exit 0 reported as ContainerStatusUnknown", want: "recorded exit",
			pods: []*v1.Pod{
				status("x://1", 0, v1.ContainerState{Terminated: exit("x://1", 0, "Completed")}, nil),
				status("", 0, v1.ContainerState{Terminated: exit("", 137, "ContainerStatusUnknown")}, nil),
			}},
		{name: "an exit reported lost by containerd", want: "reported lost",
			pods: []*v1.Pod{
				status("x://1", 0, running, nil),
				status("x://1", 0, v1.ContainerState{Terminated: exit("x://1", 255, "Unknown")}, nil),
			}},
		{name: "pod gone while its process ran", want: "left the API while processes",
			pods: []*v1.Pod{status("x://1", 0, running, nil)}, alive: []int{4242}, leaves: true},
		{name: "pod gone without a delete from the test", want: "without a delete from the test",
			pods: []*v1.Pod{status("x://1", 0, running, nil)}, leaves: true, unasked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCrashChecker(func(types.UID) []int { return tc.alive })
			for _, p := range tc.pods {
				c.observe(p)
			}
			if tc.leaves {
				if !tc.unasked {
					c.markRequested(tc.pods[0].UID)
				}
				c.gone(tc.pods[0])
			}
			v, _, _ := c.report()
			if len(v) == 0 || !strings.Contains(v[0], tc.want) {
				t.Fatalf("violations %q, want first one with %q", v, tc.want)
			}
		})
	}
	// A pod the test deleted, gone with nothing left running, is fine.
	c := newCrashChecker(func(types.UID) []int { return nil })
	pod := status("x://1", 0, running, nil)
	c.observe(pod)
	c.markRequested(pod.UID)
	c.gone(pod)
	if v, _, _ := c.report(); len(v) != 0 {
		t.Fatalf("violations %q for a pod deleted by the test", v)
	}
	// A terminal phase that changes.
	c = newCrashChecker(func(types.UID) []int { return nil })
	done := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}, Status: v1.PodStatus{Phase: v1.PodSucceeded}}
	again := done.DeepCopy()
	again.Status.Phase = v1.PodRunning
	c.observe(done)
	c.observe(again)
	if v, _, _ := c.report(); len(v) != 1 || !strings.Contains(v[0], "terminal phase") {
		t.Fatalf("violations %q, want the terminal phase change", v)
	}
}
