package lifecycle

import (
	"maps"
	"time"

	v1 "k8s.io/api/core/v1"
)

// podState is one run of Compute: the snapshot and the decisions so far.
type podState struct {
	s          Snapshot
	pod        *v1.Pod
	now        time.Time
	cfg        Config
	containers []*container
	backOff    map[string]BackOffEntry // updated copy of s.BackOff
	wake       time.Time

	term         *Termination // s.Termination, or the active deadline's
	deadlineHit  bool
	prevTerminal bool // the published phase is terminal (§2 rule 7)
	// initialized: every regular init container completed and every sidecar
	// started, or a regular container was already tried (after which init
	// containers are not run again).
	initialized bool
	// ending: the pod will start nothing more, only stop what runs.
	ending bool
	// sandboxLost: the pod's sandbox is gone and it gets no new one (a pod
	// that never restarts, sandbox.go): it ends with what it has.
	sandboxLost bool
	// restarting: all containers restart (KEP-5532); restartUnfinished:
	// some are still to be stopped and removed first; resetPending: and the
	// pod is not ending, so they are.
	restarting        bool
	restartUnfinished bool
	resetPending      bool
	// resizeEvents are the events of the resize conditions' changes.
	resizeEvents []Event
}

// Compute decides, from what is known of one pod now, the status to publish
// and what to do next. It is a pure function of s.
//
// Contract for the caller:
//   - s.Pod.Status is the status last published (best: the previous
//     Plan.Status with the API's conditions of other writers merged in). Its
//     phase and reason (terminal phase sticks, DeadlineExceeded), conditions
//     (lastTransitionTime, readiness gates, others' conditions), startTime
//     and container statuses (BackOff and DeadlineExceeded events are sent
//     once, when the published status does not show them yet) are inputs.
//   - Containers holds every container ever created for the pod; a missing
//     entry means "never tried". Set WaitingSince with Waiting.
//   - BackOff is what the previous Plan returned.
//   - Actions must be carried out, and a new Compute run when any of them
//     completes, when a container changes state, when a probe result
//     changes, and at WakeAt.
//   - Done: the pod reached its end on this node (terminal phase, nothing
//     running, starting or stopping): publish Status, then clean up.
func Compute(s Snapshot) Plan {
	p := &podState{
		s:            s,
		pod:          s.Pod,
		now:          s.Now,
		cfg:          s.Config.normalized(),
		containers:   containersOf(s),
		backOff:      maps.Clone(s.BackOff),
		prevTerminal: isTerminal(s.Pod.Status.Phase),
	}
	if p.backOff == nil {
		p.backOff = map[string]BackOffEntry{}
	}
	p.term, p.deadlineHit = effectiveTermination(s)
	p.decide()

	var init, regular, ephemeral []v1.ContainerStatus
	ref := podRef(p.pod)
	for _, c := range p.containers {
		st := containerStatus(p.pod, c, ref)
		if c.ephemeral {
			p.statusResources(&st, c)
			st.Ready = false // never ready: no probes, not a part of the pod's readiness
			ephemeral = append(ephemeral, st)
			continue
		}
		p.carryOver(&st, c)
		p.statusResources(&st, c)
		if c.init {
			init = append(init, st)
		} else {
			regular = append(regular, st)
		}
	}
	phase := p.phase(init, regular)
	if p.resetPending && isTerminal(phase) {
		// The exit that restarts everything is not the pod's end.
		phase = p.pod.Status.Phase
		if phase == "" {
			phase = v1.PodPending
		}
	}

	var actions []Action
	switch {
	case p.resetPending && !p.ending:
		actions = p.planReset()
	case p.ending || isTerminal(phase):
		actions = p.planStop()
	default:
		actions = p.planRun()
	}
	events := p.backOffEvents(init, regular)
	events = append(events, p.sandboxChangedEvents()...)

	done := (p.term != nil || p.sandboxLost || isTerminal(phase)) && !p.anyAlive()
	if done {
		finalizeStatuses(init, regular)
		if !isTerminal(phase) {
			phase = v1.PodFailed // a pod never ends on a node without a terminal phase
		}
	}

	status := p.podStatus(phase, init, regular, done)
	status.EphemeralContainerStatuses = ephemeral
	events = append(events, p.resizeEvents...)
	if p.deadlineHit && p.pod.Status.Reason != ReasonDeadlineExceeded {
		events = append(events, Event{Type: v1.EventTypeNormal, Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded})
	}
	if deadline, ok := activeDeadline(s); ok && p.term == nil && !isTerminal(phase) {
		p.wakeAt(deadline)
	}
	for _, c := range p.containers {
		if c.restart && c.backOff && !p.ending {
			p.wakeAt(c.backOffEnd)
		}
	}
	return Plan{
		Actions: actions,
		WakeAt:  p.wake,
		Status:  status,
		BackOff: p.backOff,
		Events:  events,
		Done:    done,
	}
}

// decide settles, before any status is rendered, which exited containers
// will be restarted and whether the pod is ending.
func (p *podState) decide() {
	// Initialized in this sandbox: what ran in an earlier one does not count
	// (a new sandbox runs the init containers again).
	p.initialized = true
	for _, c := range p.containers {
		if c.init && !c.initDone() {
			p.initialized = false
			break
		}
	}
	for _, c := range p.containers {
		if c.regular() && (c.rec.Starting || c.attempted() && !c.stale()) {
			p.initialized = true
		}
	}

	frozen := p.term != nil || p.prevTerminal
	p.decideRestartAll(frozen)
	if p.resetPending {
		return // nothing restarts on its own, nothing ends: all are removed first
	}
	p.sandboxLost = !frozen && p.sandboxGoneForGood()
	for _, c := range p.containers {
		if !c.sidecar && !c.ephemeral && c.exited() {
			c.restart = !frozen && !p.sandboxLost && (c.rerun() || c.rec.ResizeRestart || wantsRestart(p.pod, c, c.rec.Current.ExitCode))
		}
	}
	p.ending = frozen || p.sandboxLost || p.initFailed() || p.regularDone()
	for _, c := range p.containers {
		if c.exited() && (c.sidecar || c.rerun()) {
			c.restart = !p.ending
		}
	}
	for _, c := range p.containers {
		if !c.restart || c.rerun() || c.rec.ResizeRestart {
			// A rerun is a first run in the new sandbox, a restart for a
			// resize no crash: no back-off.
			continue
		}
		e, found := p.backOff[c.name()]
		c.delay = min(e.Delay, p.cfg.MaxBackOff)
		c.backOffEnd, c.backOff = p.cfg.backOffUntil(e, found, c.rec.Current.FinishedAt, p.now)
	}
}

// initFailed: a regular init container failed and will not run again, so
// the pod fails (§2 rule 3).
func (p *podState) initFailed() bool {
	for _, c := range p.containers {
		if c.regularInit() && c.exited() && c.rec.Current.ExitCode != 0 && !c.restart {
			return true
		}
	}
	return false
}

// regularDone: every regular container ran and exited for good, so sidecars
// must not keep the pod alive (§11): they are stopped, not restarted. (Before
// initialization no regular container has an instance; after the pod's
// sandbox died, one that succeeded stays done, as upstream, which then makes
// no new sandbox.)
func (p *podState) regularDone() bool {
	for _, c := range p.containers {
		if c.regular() && (!c.exited() || c.restart || c.busy()) {
			return false
		}
	}
	return true
}

func (p *podState) anyAlive() bool {
	for _, c := range p.containers {
		if c.alive() {
			return true
		}
	}
	return false
}

// phase is §2: computed from the statuses, then the termination's verdict,
// and a terminal published phase never changes (rule 7).
func (p *podState) phase(init, regular []v1.ContainerStatus) v1.PodPhase {
	if p.prevTerminal {
		return p.pod.Status.Phase
	}
	phase := phaseOf(p.pod, init, regular)
	if p.term != nil && p.term.Reason != "" && phase != v1.PodSucceeded {
		phase = v1.PodFailed
	}
	return phase
}

func (p *podState) podStatus(phase v1.PodPhase, init, regular []v1.ContainerStatus, done bool) v1.PodStatus {
	old := &p.pod.Status
	st := *old.DeepCopy() // keeps what others own (nominatedNodeName, resource claims, …)
	st.Phase = phase
	st.ObservedGeneration = p.pod.Generation
	if phase != old.Phase {
		st.Reason, st.Message = "", ""
	}
	if t := p.term; t != nil && t.Reason != "" && !p.prevTerminal {
		st.Reason, st.Message = t.Reason, t.Message
	}
	st.InitContainerStatuses = init
	st.ContainerStatuses = regular
	if p.s.HostIP != "" {
		st.HostIP = p.s.HostIP
		st.HostIPs = []v1.HostIP{{IP: p.s.HostIP}}
	}
	if p.s.PodIP != "" {
		st.PodIP = p.s.PodIP
		st.PodIPs = []v1.PodIP{{IP: p.s.PodIP}}
	}
	if st.StartTime == nil || st.StartTime.IsZero() {
		t := apiTime(p.now)
		st.StartTime = &t
	}
	st.QOSClass = qosClass(p.pod)
	st.Conditions = conditions(p.pod, old.Conditions, phase, init, regular, p.s.SandboxReady && !done, p.now)
	st.Conditions, p.resizeEvents = p.setResizeConditions(st.Conditions, phase)
	if couldRestartAll(&p.pod.Spec) {
		c := stamp(p.allContainersRestarting(phase), p.pod, old.Conditions, p.now)
		if o := conditionOf(st.Conditions, c.Type); o != nil {
			*o = c
		} else {
			st.Conditions = append(st.Conditions, c)
		}
	}
	return st
}

func (p *podState) wakeAt(t time.Time) {
	if p.wake.IsZero() || t.Before(p.wake) {
		p.wake = t
	}
}
