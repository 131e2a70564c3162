package podworker

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/podvisor/podvisor/internal/agent/volume"
)

func volumeWorker(t *testing.T, pod *v1.Pod, objects ...k8sruntime.Object) (*worker, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	cs := fake.NewClientset(objects...)
	rec := record.NewFakeRecorder(100)
	m, err := New(Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(newFakeRuntime()), Status: &statusLog{last: map[types.UID]v1.PodStatus{}}, Recorder: rec, Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	return newWorker(m, pod, nil, nil), cs, rec
}

func TestWaitingReasonOfAFailedMountIsContainerCreating(t *testing.T) {
	for _, tc := range []struct {
		err    error
		reason string
		event  bool
	}{
		{volume.MountError{ConfigError: configError{Msg: "m"}}, "ContainerCreating", false},
		{configError{Msg: "c"}, "CreateContainerConfigError", true},
		{errors.New("x"), "RunContainerError", true},
	} {
		if r, ev := waitingReason(tc.err); r != tc.reason || ev != tc.event {
			t.Errorf("waitingReason(%T) = %s %v, want %s %v", tc.err, r, ev, tc.reason, tc.event)
		}
	}
}
