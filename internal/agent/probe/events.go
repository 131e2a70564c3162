package probe

import (
	v1 "k8s.io/api/core/v1"
)

// Event reasons, as upstream (pkg/kubelet/events).
const (
	ReasonUnhealthy    = "Unhealthy"
	ReasonProbeWarning = "ProbeWarning"
)

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
