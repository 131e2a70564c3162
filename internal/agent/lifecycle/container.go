package lifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// container is one container of the spec together with what is known of it
// and what Compute decided for it.
type container struct {
	spec    *v1.Container
	init    bool // an init container (sidecars included)
	sidecar bool // an init container with restartPolicy Always (§11)
	// ephemeral: an ephemeral container (kubectl debug): started once in
	// the running pod, never restarted, no part of the pod's phase or
	// readiness (planStarts, Compute).
	ephemeral bool
	rec       ContainerRecord
	probe     ProbeState

	// restart: Current exited and will be started again (§4).
	restart bool
	// backOff: the restart waits for the crash-loop back-off until backOffEnd.
	backOff    bool
	backOffEnd time.Time
	delay      time.Duration
	// carried: the restart count a container without an instance keeps
	// after a restart of all containers; its next start uses it.
	carried int32
}

// containersOf lists the pod's containers: init containers then regular
// ones, each in spec order.
func containersOf(s Snapshot) []*container {
	spec := &s.Pod.Spec
	out := make([]*container, 0, len(spec.InitContainers)+len(spec.Containers))
	add := func(c *v1.Container, init bool) {
		out = append(out, &container{
			spec:    c,
			init:    init,
			sidecar: init && isSidecar(c),
			rec:     s.Containers[c.Name],
			probe:   s.Probes[c.Name],
		})
	}
	for i := range spec.InitContainers {
		add(&spec.InitContainers[i], true)
	}
	for i := range spec.Containers {
		add(&spec.Containers[i], false)
	}
	for i := range spec.EphemeralContainers {
		add((*v1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon), false)
		out[len(out)-1].ephemeral = true
	}
	return out
}

func isSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

func (c *container) name() string { return c.spec.Name }

// regular is a container of spec.containers.
func (c *container) regular() bool { return !c.init && !c.ephemeral }

// regularInit is an init container that must run to completion.
func (c *container) regularInit() bool { return c.init && !c.sidecar }

func (c *container) busy() bool { return c.rec.Starting || c.rec.Stopping }

func (c *container) exited() bool {
	return c.rec.Current != nil && c.rec.Current.State == StateExited
}

// alive: something of the container may still run, or an operation on it is
// in flight. An instance in an unknown state counts as alive: it may run.
func (c *container) alive() bool {
	return c.busy() || (c.rec.Current != nil && c.rec.Current.State != StateExited)
}

// running is what status reports as running: a container is not Running
// until its postStart hook has completed (§3, §7).
func (c *container) running() bool {
	cur := c.rec.Current
	return cur != nil && cur.State == StateRunning && cur.PostStartDone && !c.rec.Starting
}

// started: running and, with a startup probe, that probe succeeded (§6).
func (c *container) started() bool {
	if !c.running() {
		return false
	}
	return c.regularInit() || c.spec.StartupProbe == nil || c.probe.Started
}

// ready: for a regular init container, completed; otherwise started and,
// with a readiness probe, that probe succeeded (§6).
func (c *container) ready() bool {
	if c.regularInit() {
		return c.completed()
	}
	return c.started() && (c.spec.ReadinessProbe == nil || c.probe.Ready)
}

// completed: a regular init container whose newest instance exited 0.
func (c *container) completed() bool {
	return c.regularInit() && c.exited() && c.rec.Current.ExitCode == 0
}

// attempted: the agent has tried to create this container at least once.
func (c *container) attempted() bool {
	return c.rec.Current != nil || c.rec.Waiting != nil || c.rec.Starting
}

// waitingRetryAt is when a start that failed with rec.Waiting may be tried
// again; zero when there is no such failure.
func (c *container) waitingRetryAt(cfg Config) time.Time {
	if c.rec.Waiting == nil || c.rec.WaitingSince.IsZero() {
		return time.Time{}
	}
	return c.rec.WaitingSince.Add(cfg.waitingRetry())
}
