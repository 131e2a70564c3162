package lifecycle

import (
	"maps"

	v1 "k8s.io/api/core/v1"
)

// Event reasons the core decides on.
const EventBackOff = "BackOff"

// planRun is the plan of a pod that is not ending: kill what its liveness
// or startup probe condemned, then start what is due.
func (p *podState) planRun() []Action {
	if kills, alive := p.stopOrdered((*container).stale); alive {
		return kills // what runs in a sandbox that is gone stops first
	}
	var actions []Action
	for _, c := range p.containers {
		if c.rec.Current != nil && c.rec.Current.State == StateRunning && c.probe.Unhealthy && !c.busy() {
			actions = append(actions, p.killUnhealthy(c))
		}
	}
	if p.s.SandboxReady {
		actions = append(actions, p.planResize()...)
	}
	if !p.s.SandboxReady {
		// Nothing starts outside a sandbox, and a sandbox is made only when
		// something is due to start: a pod whose containers are done for
		// good gets none (as upstream, for a Never pod whose sandbox died).
		saved := maps.Clone(p.backOff)
		due := p.planStarts()
		p.backOff = saved // nothing started: no back-off step taken
		if len(due) > 0 {
			actions = append(actions, Action{Kind: ActionRunSandbox})
		}
		return actions
	}
	return append(actions, p.planStarts()...)
}

// planStarts is the starts due now.
func (p *podState) planStarts() []Action {
	// Ephemeral containers start in the running sandbox whether or not
	// initialization is over, as upstream; once only.
	var actions []Action
	for _, c := range p.containers {
		if c.ephemeral && !c.busy() {
			actions = p.appendStart(actions, c)
		}
	}
	if !p.initialized {
		// Init containers one at a time in spec order (§11): a regular one
		// must complete, a sidecar must be started, before the next begins.
		for _, c := range p.containers {
			if !c.init {
				break
			}
			if c.initDone() {
				continue
			}
			if !c.busy() {
				actions = p.appendStart(actions, c)
			}
			break
		}
		return actions
	}
	// Initialized: sidecars and regular containers are (re)started on their
	// own, all in the same plan.
	for _, c := range p.containers {
		if (c.sidecar || c.regular()) && !c.busy() {
			actions = p.appendStart(actions, c)
		}
	}
	return actions
}

// appendStart adds the start of c when one is due now: a first start, or a
// restart past its back-off. It notes when to look again otherwise.
func (p *podState) appendStart(actions []Action, c *container) []Action {
	cur := c.rec.Current
	if cur != nil && !c.restart {
		return actions // running, starting up, or done for good
	}
	if at := c.waitingRetryAt(p.cfg); !at.IsZero() && p.now.Before(at) {
		p.wakeAt(at)
		return actions
	}
	if cur == nil {
		// After a restart of all containers, the count goes on (KEP-5532).
		return append(actions, Action{Kind: ActionStart, Container: c.name(), Init: c.init, Attempt: c.carried})
	}
	if c.rerun() || c.rec.ResizeRestart {
		return append(actions, Action{Kind: ActionStart, Container: c.name(), Init: c.init, Attempt: cur.Attempt + 1})
	}
	if c.backOff {
		return actions // WakeAt and the event come from the status pass
	}
	e, found := p.backOff[c.name()]
	p.backOff[c.name()] = p.cfg.nextBackOff(e, found, cur.FinishedAt, p.now)
	return append(actions, Action{Kind: ActionStart, Container: c.name(), Init: c.init, Attempt: cur.Attempt + 1})
}

// killUnhealthy stops a container its liveness or startup probe condemned;
// once it exited, the restart policy applies as for any exit (§6).
func (p *podState) killUnhealthy(c *container) Action {
	grace := podGrace(p.pod)
	if g := c.probe.Grace; g != nil {
		grace = Seconds(*g)
	}
	return Action{Kind: ActionKill, Container: c.name(), Init: c.init, Grace: grace, Message: c.probe.KillMessage}
}

// backOffEvents is the BackOff event of every container in back-off whose
// published status did not already show this back-off, so that one crash
// gives one event however often Compute runs.
func (p *podState) backOffEvents(init, regular []v1.ContainerStatus) []Event {
	var events []Event
	for _, list := range [][]v1.ContainerStatus{init, regular} {
		for i := range list {
			st := &list[i]
			if st.State.Waiting == nil || st.State.Waiting.Reason != ReasonCrashLoopBackOff {
				continue
			}
			if old := p.publishedStatus(st.Name); old != nil && old.State.Waiting != nil &&
				old.State.Waiting.Reason == ReasonCrashLoopBackOff && old.ContainerID == st.ContainerID {
				continue
			}
			events = append(events, Event{
				Container: st.Name,
				Type:      v1.EventTypeWarning,
				Reason:    EventBackOff,
				Message:   "Back-off restarting failed container " + st.Name + " in pod " + podRef(p.pod),
			})
		}
	}
	return events
}

func (p *podState) publishedStatus(name string) *v1.ContainerStatus {
	if st := statusOf(p.pod.Status.InitContainerStatuses, name); st != nil {
		return st
	}
	return statusOf(p.pod.Status.ContainerStatuses, name)
}
