package lifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// RejectedMessagePrefix starts the status message of a pod refused at
// admission; the event carries the admission's message alone, as upstream.
const RejectedMessagePrefix = "Pod was rejected: "

// Rejected is the status of a pod the node refused to admit, as upstream's
// kubelet publishes it: Failed with the admission's reason and message, the
// QoS class kept, and the generation it observed on the status and on
// PodScheduled (the kubelet owns that condition once the pod is bound), and
// a start time. Conditions of other writers are kept; the pod never ran, so there are no
// container statuses.
func Rejected(pod *v1.Pod, reason, message string, now time.Time) v1.PodStatus {
	st := v1.PodStatus{
		Phase:              v1.PodFailed,
		Reason:             reason,
		Message:            RejectedMessagePrefix + message,
		QOSClass:           qosClass(pod),
		ObservedGeneration: pod.Generation,
		StartTime:          pod.Status.StartTime,
	}
	if st.StartTime == nil || st.StartTime.IsZero() {
		t := apiTime(now) // upstream's status manager gives every status a start time
		st.StartTime = &t
	}
	scheduled := stamp(scheduledCondition(), pod, pod.Status.Conditions, now)
	for _, c := range pod.Status.Conditions {
		if !owned(c.Type) {
			st.Conditions = append(st.Conditions, *c.DeepCopy())
		}
	}
	st.Conditions = append(st.Conditions, scheduled)
	return st
}
