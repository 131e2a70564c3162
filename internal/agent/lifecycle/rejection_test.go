package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod refused at admission is published as upstream's kubelet does:
// Failed, the admission's reason, "Pod was rejected: " and its message, the
// QoS class kept, observedGeneration on the status and on PodScheduled.
func TestRejectedStatus(t *testing.T) {
	old := metav1.NewTime(t0.Add(-time.Hour))
	gate := v1.PodCondition{Type: "example.com/gate", Status: v1.ConditionFalse, LastTransitionTime: old}
	pod := newPod(containers("c1"), func(p *v1.Pod) {
		p.Generation = 2
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
		p.Status.Conditions = []v1.PodCondition{
			{Type: v1.PodScheduled, Status: v1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: old},
			gate,
		}
	})
	st := Rejected(pod, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 1000, used: 0, capacity: 500", t0)
	if st.Phase != v1.PodFailed || st.Reason != "OutOfcpu" ||
		st.Message != "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000, used: 0, capacity: 500" {
		t.Errorf("phase/reason/message: %s/%s/%q", st.Phase, st.Reason, st.Message)
	}
	if st.ObservedGeneration != 2 {
		t.Errorf("observedGeneration = %d, want the pod's generation 2", st.ObservedGeneration)
	}
	if st.QOSClass != v1.PodQOSBurstable {
		t.Errorf("qosClass = %q, want Burstable", st.QOSClass)
	}
	if st.StartTime == nil || !st.StartTime.Equal(ptrTime(metav1.NewTime(t0))) {
		t.Errorf("startTime = %v, want now", st.StartTime)
	}
	if len(st.InitContainerStatuses)+len(st.ContainerStatuses) != 0 {
		t.Errorf("a rejected pod has no container statuses: %+v", st)
	}
	c := conditionOf(st.Conditions, v1.PodScheduled)
	if c == nil || c.Status != v1.ConditionTrue || c.ObservedGeneration != 2 || !c.LastTransitionTime.Equal(&old) {
		t.Errorf("PodScheduled = %+v, want True, generation 2, transition kept", c)
	}
	if g := conditionOf(st.Conditions, gate.Type); g == nil || g.Status != gate.Status || len(st.Conditions) != 2 {
		t.Errorf("conditions of other writers are kept: %+v", st.Conditions)
	}

	// Bound by spec.nodeName: PodScheduled appears, transition now.
	pod.Status.Conditions = nil
	st = Rejected(pod, "PodOSNotSupported", "Failed to admit pod as the OS field doesn't match node OS", t0)
	if c := conditionOf(st.Conditions, v1.PodScheduled); c == nil || c.ObservedGeneration != 2 || !c.LastTransitionTime.Equal(ptrTime(metav1.NewTime(t0))) {
		t.Errorf("PodScheduled of a pod bound by spec.nodeName: %+v", st.Conditions)
	}
}
