package bench

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/timeline"
)

// nopStatuses is a status writer that writes nowhere.
type nopStatuses struct{}

func (nopStatuses) Set(*v1.Pod, v1.PodStatus, bool) {}
func (nopStatuses) Forget(types.UID)                {}

// BenchmarkTimelineStatus is what the timeline adds to each status the pod
// workers write: the diff against the last one and the record, on disk as
// the agent keeps it. One op is a pod's start as its statuses go (pending,
// container running, ready): three statuses, seven to ten entries.
func BenchmarkTimelineStatus(b *testing.B) {
	rec, err := timeline.New(timeline.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rec.Close) // before the directory goes
	s := &timeline.Statuses{Next: nopStatuses{}, Rec: rec}
	pending := v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue}, {Type: v1.PodReadyToStartContainers, Status: v1.ConditionFalse},
		{Type: v1.PodInitialized, Status: v1.ConditionTrue}, {Type: v1.ContainersReady, Status: v1.ConditionFalse},
		{Type: v1.PodReady, Status: v1.ConditionFalse}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}
	running := *pending.DeepCopy()
	running.Phase = v1.PodRunning
	running.Conditions[1].Status = v1.ConditionTrue
	running.ContainerStatuses[0].State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}}
	running.ContainerStatuses[0].Started = ptr.To(true)
	ready := *running.DeepCopy()
	ready.Conditions[3].Status, ready.Conditions[4].Status = v1.ConditionTrue, v1.ConditionTrue
	ready.ContainerStatuses[0].Ready = true
	b.ReportAllocs()
	begin := time.Now()
	for i := 0; b.Loop(); i++ {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		s.Set(pod, pending, false)
		s.Set(pod, running, false)
		s.Set(pod, ready, false)
		if i%1000 == 999 { // the node's pods come and go
			for j := i - 999; j <= i; j++ {
				s.Forget(types.UID(fmt.Sprintf("uid-%d", j)))
			}
		}
	}
	b.ReportMetric(float64(time.Since(begin).Microseconds())/float64(b.N), "µs/pod-start")
}
