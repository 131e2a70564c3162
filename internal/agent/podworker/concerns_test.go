package podworker

import (
	"context"
	"net/url"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/podvisor/podvisor/internal/runtime"
)

// fakeStreams is a runtime's interactive sessions; the pod worker only
// looks at whether the set has them.
type fakeStreams struct{}

func (fakeStreams) GetExec(context.Context, runtime.ExecRequest) (*url.URL, error) { return nil, nil }
func (fakeStreams) GetAttach(context.Context, runtime.AttachRequest) (*url.URL, error) {
	return nil, nil
}
func (fakeStreams) GetPortForward(context.Context, runtime.PortForwardRequest) (*url.URL, error) {
	return nil, nil
}

// A container with stdin or a TTY needs a runtime whose set has Streams
// (someone must be able to attach to it): without, it waits with
// CreateContainerConfigError; with, it runs.
func TestStdinNeedsARuntimeWithStreams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		streams runtime.Streamer
	}{{"without streams", nil}, {"with streams", fakeStreams{}}} {
		t.Run(tc.name, func(t *testing.T) {
			statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
			set := setOf(newFakeRuntime())
			set.Streams = tc.streams
			m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: set, Status: statuses, Recorder: record.NewFakeRecorder(100)})
			pod := testPod("stdin")
			pod.Spec.Containers[0].Stdin, pod.Spec.Containers[0].TTY = true, true
			m.UpdatePod(pod)
			want := "running"
			if tc.streams == nil {
				want = "waiting CreateContainerConfigError"
			}
			waitStatus(t, statuses, pod.UID, "c "+want, func(st v1.PodStatus) bool {
				for _, cs := range st.ContainerStatuses {
					if cs.Name != "c" {
						continue
					}
					if tc.streams == nil {
						return cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError"
					}
					return cs.State.Running != nil
				}
				return false
			})
		})
	}
}
