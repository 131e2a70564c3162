package lifecycle

import (
	"math"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Active deadline (§8).
const (
	ReasonDeadlineExceeded  = "DeadlineExceeded"
	MessageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// defaultGrace is terminationGracePeriodSeconds' API default.
const defaultGrace = 30 * time.Second

func podGrace(pod *v1.Pod) time.Duration {
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return Seconds(*g)
	}
	return defaultGrace
}

// Seconds is n seconds as a Duration: negative counts as 0 and more than a
// Duration holds (about 292 years) as the largest one. The API bounds no
// grace period, and a plain conversion of a huge one wraps to a negative
// Duration: an immediate kill instead of a very patient one.
func Seconds(n int64) time.Duration {
	switch {
	case n <= 0:
		return 0
	case n > math.MaxInt64/int64(time.Second):
		return math.MaxInt64
	}
	return time.Duration(n) * time.Second
}

// startTime is when the agent first saw the pod: the published one, else now.
func startTime(s Snapshot) time.Time {
	if t := s.Pod.Status.StartTime; t != nil && !t.IsZero() {
		return t.Time
	}
	return s.Now
}

// activeDeadline returns the instant spec.activeDeadlineSeconds ends; ok is
// false when the pod has none.
func activeDeadline(s Snapshot) (deadline time.Time, ok bool) {
	ads := s.Pod.Spec.ActiveDeadlineSeconds
	if ads == nil {
		return time.Time{}, false
	}
	return startTime(s).Add(Seconds(*ads)), true
}

// effectiveTermination is s.Termination, or the termination the active
// deadline calls for (§8): the grace clock of that one starts at the
// deadline. A pod that reached a terminal phase on its own before the
// deadline is left alone.
func effectiveTermination(s Snapshot) (t *Termination, deadlineHit bool) {
	if s.Termination != nil {
		return s.Termination, false
	}
	deadline, ok := activeDeadline(s)
	if !ok || s.Now.Before(deadline) {
		return nil, false
	}
	if isTerminal(s.Pod.Status.Phase) && s.Pod.Status.Reason != ReasonDeadlineExceeded {
		return nil, false
	}
	return &Termination{
		Since:   deadline,
		Grace:   podGrace(s.Pod),
		Reason:  ReasonDeadlineExceeded,
		Message: MessageDeadlineExceeded,
	}, true
}

// planStop stops what still runs of a pod that is ending (terminating, or
// terminal, or whose regular containers are all done): every regular and
// init container at once, then the sidecars one by one in reverse spec order,
// each only after the one behind it has exited (§8 step 3, §11).
func (p *podState) planStop() []Action {
	actions, _ := p.stopOrdered(func(*container) bool { return true })
	return actions
}

// stopOrdered stops the alive containers that which selects, in planStop's
// order; alive reports whether any of them is still alive.
func (p *podState) stopOrdered(which func(*container) bool) (actions []Action, alive bool) {
	for _, c := range p.containers {
		if c.sidecar || !c.alive() || !which(c) {
			continue
		}
		alive = true
		if !c.busy() {
			actions = append(actions, p.stop(c))
		}
	}
	if alive {
		return actions, true
	}
	for i := len(p.containers) - 1; i >= 0; i-- {
		c := p.containers[i]
		if !c.sidecar || !c.alive() || !which(c) {
			continue
		}
		if !c.busy() {
			actions = append(actions, p.stop(c))
		}
		return actions, true
	}
	return nil, false
}

// stop is the kill of c's current instance with what is left of the grace
// period: of the termination when there is one (the worker enforces the 2 s
// minimum), else the pod's.
func (p *podState) stop(c *container) Action {
	grace := podGrace(p.pod)
	msg := "Stopping container " + c.name()
	if t := p.term; t != nil {
		grace = max(t.Grace-max(p.now.Sub(t.Since), 0), 0)
		if t.KillMessage != "" {
			msg = t.KillMessage
		}
	}
	return Action{Kind: ActionKill, Container: c.name(), Init: c.init, Grace: grace, Message: msg}
}
