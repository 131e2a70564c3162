package podworker

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/runtime"
)

// createFails is a runtime whose Create fails for one container, so that
// the container waits with CreateContainerError and never has an instance.
type createFails struct {
	*fakeRuntime
	name string
}

func (c createFails) Create(ctx context.Context, s runtime.ContainerSpec) (string, error) {
	if s.Name == c.name {
		return "", errors.New("no such image")
	}
	return c.fakeRuntime.Create(ctx, s)
}

// exit makes the newest instance of container name exit with code, and
// tells the manager as the runtime's event stream does.
func (f *fakeRuntime) exit(t *testing.T, name string, code int32) {
	t.Helper()
	f.mu.Lock()
	var st runtime.Status
	for _, s := range f.byID {
		if s.Name == name && s.Attempt >= st.Attempt {
			st = s
		}
	}
	if st.ID == "" {
		f.mu.Unlock()
		t.Fatalf("no instance of %s", name)
	}
	st.State, st.ExitCode, st.FinishedAt = runtime.StateExited, code, time.Now()
	f.byID[st.ID] = st
	f.mu.Unlock()
	f.events <- runtime.Event{ID: st.ID, PodUID: st.PodUID, Name: name, State: runtime.StateExited}
}

// KEP-5532: a container whose create failed has no instance to remove, but
// a restart of all containers must still make it forget the failure, or
// the restarted pod counts as initialized and its init containers never run
// again (and, since the failure is still there, the restart never ends).
func TestResetForgetsAFailedCreate(t *testing.T) {
	rt := createFails{fakeRuntime: newFakeRuntime(), name: "failed"}
	m, statuses, _ := newAdoptionManager(t, rt)
	pod := testPod("restart-all")
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Command: []string{"true"}}}
	pod.Spec.Containers = []v1.Container{{Name: "failed", Command: []string{"true"}}, {Name: "source", Command: []string{"true"},
		RestartPolicy: ptr.To(v1.ContainerRestartPolicyNever),
		RestartPolicyRules: []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}}}
	m.UpdatePod(pod)

	running := func(list []v1.ContainerStatus, name string, restarts int32) bool {
		for _, cs := range list {
			if cs.Name == name {
				return cs.State.Running != nil && cs.RestartCount == restarts
			}
		}
		return false
	}
	waitStatus(t, statuses, pod.UID, "init running", func(st v1.PodStatus) bool { return running(st.InitContainerStatuses, "init", 0) })
	rt.exit(t, "init", 0)
	waitStatus(t, statuses, pod.UID, "source running, failed waiting", func(st v1.PodStatus) bool {
		return running(st.ContainerStatuses, "source", 0) && len(st.ContainerStatuses) == 2 &&
			st.ContainerStatuses[0].State.Waiting != nil && st.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerError"
	})
	rt.exit(t, "source", 42)
	waitStatus(t, statuses, pod.UID, "init running again after the restart of all containers", func(st v1.PodStatus) bool {
		return running(st.InitContainerStatuses, "init", 1)
	})
}
