package podworker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testclock "k8s.io/utils/clock/testing"
)

// failingUnmount is the volume manager whose Unmount fails until told.
type failingUnmount struct {
	Volumes
	ok    atomic.Bool
	tries atomic.Int32
}

func (f *failingUnmount) Unmount(ctx context.Context, podDir string) error {
	f.tries.Add(1)
	if !f.ok.Load() {
		return errors.New("NodeUnpublishVolume: the driver failed")
	}
	return f.Volumes.Unmount(ctx, podDir)
}

// A pod the node's shutdown (or eviction) stops counts as stopped only once
// its CSI volumes are unmounted: while the unmount fails (and is retried)
// the channel TerminatePod returned stays open, as upstream's shutdown
// manager waits for a band's unmounts.
func TestTerminatedPodIsStoppedOnlyOnceItsVolumesAreUnmounted(t *testing.T) {
	clk := testclock.NewFakeClock(time.Now())
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m, err := New(Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(newFakeRuntime()), Status: statuses,
		Recorder: record.NewFakeRecorder(100), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	vols := &failingUnmount{Volumes: m.vols}
	m.vols = vols
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pod := testPod("with-volumes")
	m.UpdatePod(pod)
	waitStatus(t, statuses, pod.UID, "running", func(st v1.PodStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
	})
	stopped := m.TerminatePod(pod.UID, Termination{Grace: 0, Reason: "Terminated", Message: "node shutdown"})
	// Once the unmount has failed and the worker waits for its retry, it
	// has decided the pod is not stopped yet.
	waitFor(t, "an unmount that fails, and its retry scheduled", func() bool {
		return vols.tries.Load() >= 1 && clk.HasWaiters()
	})
	select {
	case <-stopped:
		t.Fatal("the pod was reported stopped while its volumes' unmount failed")
	default:
	}
	vols.ok.Store(true)
	clk.Step(sandboxRetry)
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatalf("the pod not reported stopped 15 s after its unmount succeeded (%d tries)", vols.tries.Load())
	}
}
