package lifecycle

import (
	v1 "k8s.io/api/core/v1"
)

// Restart of all containers (KEP-5532, Beta and on by default in 1.36).
// When a container exits with a code whose first matching restart rule has
// the action RestartAllContainers, the pod publishes AllContainersRestarting
// True, every container is stopped without preStop and with no grace (the
// 2 s minimum) and removed, as upstream does; once none is left the
// condition goes False and the pod starts again as if new: init containers
// from the first, then sidecars and regular containers. Each container that
// had an instance counts one restart, and shows the removal as its last
// state. The published condition carries the decision from one Compute to
// the next; the removal of the triggering instance is what ends it, so there
// is no loop.
const (
	ReasonRestartingAllContainers     = "RestartingAllContainers"
	ReasonRestartAllContainersStarted = "RestartAllContainersStarted"
	MessageRestartingAllContainers    = "The container is removed because RestartAllContainers in place"
	messageAllContainersRestarting    = "container exited with restart policy rule"
)

// couldRestartAll: some container of the pod has a RestartAllContainers rule;
// only such pods carry the AllContainersRestarting condition, as upstream.
func couldRestartAll(spec *v1.PodSpec) bool {
	for _, list := range [][]v1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			for _, r := range list[i].RestartPolicyRules {
				if r.Action == v1.ContainerRestartRuleActionRestartAllContainers {
					return true
				}
			}
		}
	}
	return false
}

// decideRestartAll sets restarting (a restart of all containers was asked
// for: published, or a container just exited with a matching code),
// restartUnfinished (some container still has to be stopped and removed,
// or to forget a failed start) and resetPending (the same in a pod that is
// not ending, so the removal goes on). An ending pod stops its containers
// instead, and shows the unfinished restart until it is terminal, as
// upstream.
func (p *podState) decideRestartAll(frozen bool) {
	if !couldRestartAll(&p.pod.Spec) {
		return
	}
	if c := conditionOf(p.pod.Status.Conditions, v1.AllContainersRestarting); c != nil && c.Status == v1.ConditionTrue {
		p.restarting = true
	}
	for _, c := range p.containers {
		if c.exited() && restartsAll(c.spec, c.rec.Current.ExitCode) {
			p.restarting = true
		}
	}
	if !p.restarting {
		return
	}
	for _, c := range p.containers {
		if c.resettable() || c.busy() {
			p.restartUnfinished = true
		}
	}
	p.resetPending = p.restartUnfinished && !frozen
}

// resettable: c has something a restart of all containers removes. A start
// that failed before any instance existed (rec.Waiting) counts: left in
// place, it would mark the restarted pod as initialized (a regular
// container tried), and the init containers would not run again.
func (c *container) resettable() bool {
	return !c.ephemeral && (c.rec.Current != nil || c.rec.Waiting != nil)
}

// planReset stops and removes every container, in upstream's order: the
// others first (regular before init), the ones whose exit triggered the
// restart last. A container with an operation in flight waits for its end.
func (p *podState) planReset() []Action {
	var sources, regular, init []Action
	for _, c := range p.containers {
		if !c.resettable() || c.busy() {
			continue
		}
		a := Action{Kind: ActionReset, Container: c.name(), Init: c.init, Message: "Stopping container " + c.name()}
		switch {
		case c.exited() && restartsAll(c.spec, c.rec.Current.ExitCode):
			sources = append(sources, a)
		case c.init:
			init = append(init, a)
		default:
			regular = append(regular, a)
		}
	}
	// Sources: regular ones, then init ones, as upstream.
	var srcRegular, srcInit []Action
	for _, a := range sources {
		if a.Init {
			srcInit = append(srcInit, a)
		} else {
			srcRegular = append(srcRegular, a)
		}
	}
	out := append(regular, init...)
	out = append(out, srcRegular...)
	return append(out, srcInit...)
}

// carryOver fills, in a pod that can restart all its containers, what the
// removed instances no longer tell: a container without an instance keeps
// its published restart count and last state, and the one removed by this
// restart (its published status still names an instance) shows waiting
// RestartingAllContainers with one restart more; a new instance without a
// predecessor shows the removal as its last state.
//
// Upstream counts the restart in the status only for a container that was
// not waiting, and gives the new instance one more than its log directory
// holds; with no log directory to count, the core counts every removed
// instance here, waiting ones included (unknown state, created but not
// started), so that no attempt (and no log file) is used twice.
func (p *podState) carryOver(st *v1.ContainerStatus, c *container) {
	if !couldRestartAll(&p.pod.Spec) {
		return
	}
	old := p.publishedStatus(c.name())
	if old == nil {
		return
	}
	switch {
	case c.rec.Current == nil:
		st.RestartCount = old.RestartCount
		st.LastTerminationState = *old.LastTerminationState.DeepCopy()
		if p.restarting && old.ContainerID != "" && !c.rec.Starting && c.rec.Waiting == nil {
			st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: ReasonRestartingAllContainers, Message: MessageRestartingAllContainers}}
			st.LastTerminationState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				Reason: ReasonRestartingAllContainers, Message: MessageRestartingAllContainers, ExitCode: 137,
			}}
			st.RestartCount = old.RestartCount + 1
		}
		c.carried = st.RestartCount
	case c.rec.Previous == nil && st.LastTerminationState.Terminated == nil && c.rec.Current.Attempt > 0:
		st.LastTerminationState = *old.LastTerminationState.DeepCopy()
	}
}

// allContainersRestarting is upstream's condition: True while containers
// are being removed, False otherwise (PodCompleted/PodFailed when terminal).
func (p *podState) allContainersRestarting(phase v1.PodPhase) v1.PodCondition {
	c := v1.PodCondition{Type: v1.AllContainersRestarting, Status: v1.ConditionFalse}
	switch {
	case phase == v1.PodSucceeded:
		c.Reason = ReasonPodCompleted
	case phase == v1.PodFailed:
		c.Reason = ReasonPodFailed
	case p.restartUnfinished:
		c.Status, c.Reason, c.Message = v1.ConditionTrue, ReasonRestartAllContainersStarted, messageAllContainersRestarting
	}
	return c
}
