package hook

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
)

// Event reasons, as upstream's kubelet events.
const (
	FailedPostStartHook = "FailedPostStartHook"
	FailedPreStopHook   = "FailedPreStopHook"
)

// PostStartKillMessage is the message of the Normal "Killing" event recorded
// when a container is killed because its postStart failed.
const PostStartKillMessage = "FailedPostStartHook"

// ErrPostStartHook is the start failure of a container whose postStart failed;
// its text is the Waiting reason the container shows until it is restarted.
var ErrPostStartHook = errors.New("PostStartHookError")

// Event is one event for the pod worker to record on the container.
type Event struct {
	Type    string // v1.EventTypeNormal or v1.EventTypeWarning
	Reason  string
	Message string
}

// FailedEvent is the event for a failed hook of kind k. The message is fixed,
// as upstream: the handler's output stays out of events.
func FailedEvent(k Kind) Event {
	switch k {
	case PostStart:
		return Event{Type: v1.EventTypeWarning, Reason: FailedPostStartHook, Message: "PostStartHook failed"}
	case PreStop:
		return Event{Type: v1.EventTypeWarning, Reason: FailedPreStopHook, Message: "PreStopHook failed"}
	}
	return Event{Type: v1.EventTypeWarning, Reason: "FailedLifecycleHook", Message: "lifecycle hook failed"}
}

// PostStartWaiting is the Waiting state of a container whose postStart failed,
// msg being what Run returned.
func PostStartWaiting(msg string) (reason, message string) {
	return ErrPostStartHook.Error(), msg
}

// StartContainerError is the pod sync error upstream reports for a container
// whose postStart failed:
// failed to "StartContainer" for "c" with PostStartHookError: "<msg>".
func StartContainerError(container, msg string) error {
	return fmt.Errorf("failed to %q for %q with %w: %q", "StartContainer", container, ErrPostStartHook, msg)
}
