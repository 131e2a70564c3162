package lifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// MinStopGrace is the least time any container gets between its stop signal
// and SIGKILL, whatever grace it was given (a force delete, a preStop hook
// that used up the grace period), as the kubelet's 2 s minimum (§8).
const MinStopGrace = 2 * time.Second

// PodGrace is the pod's terminationGracePeriodSeconds, 30 s when unset; it
// bounds stops the pod's own spec calls for (a failed postStart hook).
func PodGrace(pod *v1.Pod) time.Duration { return podGrace(pod) }

// DeletionGrace is the grace period of the pod's deletion through the API; 0
// when none was set.
func DeletionGrace(pod *v1.Pod) time.Duration {
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		return Seconds(*g)
	}
	return 0
}

// Remaining is what is left of t's grace period at now; negative once it has
// run out.
func (t *Termination) Remaining(now time.Time) time.Duration {
	return t.Grace - now.Sub(t.Since)
}

// StopRequest asks for a pod to be stopped: a deletion through the API
// (Reason empty) or the agent's own decision (node shutdown, eviction).
type StopRequest struct {
	Grace   time.Duration
	Reason  string
	Message string
}

// NextTermination merges a request to stop the pod into the termination in
// progress (cur, nil when none) and says whether the deadline moved earlier,
// so that stops already under way must be shortened (§8):
//   - the first request starts the grace clock now;
//   - a later deletion with a shorter grace than what is left replaces a
//     deletion in progress, as a second `kubectl delete --grace-period`;
//   - the agent's own decision takes over a deletion (its reason and message
//     become the pod's) but keeps whichever deadline comes first;
//   - nothing replaces the agent's own decision once made.
func NextTermination(cur *Termination, req StopRequest, now time.Time) (next *Termination, shortened bool) {
	grace := max(req.Grace, 0)
	switch {
	case cur == nil:
		return &Termination{Since: now, Grace: grace, Reason: req.Reason, Message: req.Message}, false
	case cur.Reason != "":
		return cur, false
	case req.Reason == "":
		if grace < cur.Remaining(now) {
			return &Termination{Since: now, Grace: grace}, true
		}
		return cur, false
	}
	left := max(cur.Remaining(now), 0)
	return &Termination{Since: now, Grace: min(grace, left), Reason: req.Reason, Message: req.Message}, grace < left
}

// PreStopBudget is how long a preStop hook may run when its container is
// stopped with the given grace: the grace period, but never less than the
// 2 s minimum.
func PreStopBudget(grace time.Duration) time.Duration { return max(grace, MinStopGrace) }

// KillAfter is the time from the stop signal to SIGKILL once the preStop
// hook has used spent of the grace period: what is left, and at least the
// 2 s minimum, so a preStop that used it all up still lets the process see
// its stop signal (as upstream).
func KillAfter(grace, spent time.Duration) time.Duration {
	return max(grace-spent, MinStopGrace)
}

// StopAfterUnroutedAnnotation opts a pod into waiting, when it is stopped
// as a whole (deleted, evicted, shut down), until the node's service proxy
// no longer sends it new connections before its containers' preStop hooks
// and stop signals: a rollout then needs no preStop sleep to lose no
// request (the race of kubernetes#106476, which upstream leaves to the
// pod). The value "true" turns it on.
const StopAfterUnroutedAnnotation = "podvisor.io/stop-after-unrouted"

// UnroutedDrain is how long a pod that waited to be unrouted still runs
// after, for the connections already made.
const UnroutedDrain = time.Second

// UnroutedWait is how long a container's stop may wait for the pod to be
// unrouted: half of the grace period it is stopped with — the other half
// stays the container's own — when the pod opted in and is stopping as a
// whole; 0 otherwise (a container restarted in a pod that keeps running
// waits for nothing).
//
// Once unrouted, the stop waits UnroutedDrain more (within the same bound)
// for connections the proxy sent before to be answered: stopped at once,
// a loaded node cut those (CI saw 11 of 700 time out).
func UnroutedWait(pod *v1.Pod, wholePod bool, grace time.Duration) time.Duration {
	if !wholePod || pod == nil || pod.Annotations[StopAfterUnroutedAnnotation] != "true" || grace <= 0 {
		return 0
	}
	return grace / 2
}
