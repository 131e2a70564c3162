package probe

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// Event reasons, as upstream (pkg/kubelet/events).
const (
	ReasonUnhealthy    = "Unhealthy"
	ReasonProbeWarning = "ProbeWarning"
)

// containerRef points an event at one container of the pod, as upstream does,
// so kubectl describe shows it on the pod with the container's field path.
func containerRef(pod *v1.Pod, name string) *v1.ObjectReference {
	field := fmt.Sprintf("spec.containers{%s}", name)
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			field = fmt.Sprintf("spec.initContainers{%s}", name)
		}
	}
	return &v1.ObjectReference{
		Kind:            "Pod",
		APIVersion:      "v1",
		Namespace:       pod.Namespace,
		Name:            pod.Name,
		UID:             pod.UID,
		ResourceVersion: pod.ResourceVersion,
		FieldPath:       field,
	}
}

// record turns one run's outcome into the event upstream records for it:
// every failure, not only the one reaching the threshold.
func (m *Manager) record(ref *v1.ObjectReference, k kind, o outcome) {
	switch {
	case o.err != nil:
		m.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, ReasonUnhealthy, "%s probe errored and resulted in unknown state: %v", k, o.err)
	case o.result == resultFailure:
		m.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, ReasonUnhealthy, "%s probe failed: %s", k, o.output)
	case o.result == resultWarning:
		m.cfg.Recorder.Eventf(ref, v1.EventTypeWarning, ReasonProbeWarning, "%s probe warning: %s", k, o.output)
	}
}
