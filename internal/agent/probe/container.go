package probe

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
)

// task is one probe of one container instance. Its fields are guarded by
// Manager.mu.
type task struct {
	c      *container
	kind   kind
	timing timing
	action action

	next    time.Time // when it is due, while in the heap
	index   int       // position in the heap; -1 when not in it
	running bool      // handed to an executor
	stopped bool      // never runs again

	// Consecutive equal results, as upstream's lastResult/resultRun.
	last result
	run  int
}

// container is one running instance with at least one probe.
type container struct {
	id        string
	podUID    types.UID
	name      string
	ref       *v1.ObjectReference
	startedAt time.Time
	kill      map[kind]string // Killing messages for liveness and startup
	tasks     [readiness + 1]*task
	state     lifecycle.ProbeState
}

func (c *container) task(k kind) *task { return c.tasks[k] }

// firstRun is when a probe may first run: never before initialDelaySeconds
// after the container started (§6).
func (c *container) firstRun(t *task, now time.Time) time.Time {
	at := c.startedAt.Add(t.timing.initialDelay)
	if at.Before(now) {
		return now
	}
	return at
}

// observe applies one run's outcome to t under the thresholds (§6) and updates
// the container's state. It returns the gated probes that may now run.
func (c *container) observe(t *task, o outcome) (ungated []*task) {
	if o.err != nil {
		return nil // Unknown: no action, and the run does not count (§6)
	}
	r := o.result
	if r == resultWarning {
		r = resultSuccess
	}
	if r == t.last {
		t.run++
	} else {
		t.last, t.run = r, 1
	}
	if (r == resultFailure && t.run < t.timing.failureThreshold) ||
		(r == resultSuccess && t.run < t.timing.successThreshold) {
		return nil // below threshold: leave the state as it is
	}
	switch t.kind {
	case readiness:
		c.state.Ready = r == resultSuccess
	case startup:
		if r == resultSuccess {
			t.stopped = true // once it succeeds it stops (§6)
			return c.markStarted()
		}
		c.markUnhealthy(t)
	case liveness:
		if r == resultFailure {
			c.markUnhealthy(t)
		}
	}
	return nil
}

// markStarted records a startup success and returns liveness and readiness,
// which were gated until now.
func (c *container) markStarted() (ungated []*task) {
	if c.state.Started {
		return nil
	}
	c.state.Started = true
	for _, k := range []kind{readiness, liveness} {
		if t := c.task(k); t != nil && !t.stopped && !t.running && t.index < 0 {
			ungated = append(ungated, t)
		}
	}
	return ungated
}

// markUnhealthy records that liveness or startup reached failureThreshold:
// the instance will be killed, so liveness and startup stop probing it, as
// upstream; readiness goes on until the instance is removed.
func (c *container) markUnhealthy(t *task) {
	c.state.Unhealthy = true
	c.state.KillMessage = c.kill[t.kind]
	c.state.Grace = nil
	if t.timing.grace != nil {
		g := *t.timing.grace
		c.state.Grace = &g
	}
	for _, k := range []kind{liveness, startup} {
		if s := c.task(k); s != nil {
			s.stopped = true
		}
	}
}

// terminate stops liveness and startup while the pod terminates (§6). Unless
// the instance is already condemned, both end on a success, as upstream does
// for a quiet shutdown; for startup that marks the container started.
func (c *container) terminate() (ungated []*task) {
	for _, k := range []kind{liveness, startup} {
		if t := c.task(k); t != nil {
			t.stopped = true
		}
	}
	if c.state.Unhealthy {
		return nil
	}
	return c.markStarted()
}

func (c *container) update() Update {
	s := c.state
	if s.Grace != nil {
		g := *s.Grace
		s.Grace = &g
	}
	return Update{PodUID: c.podUID, Container: c.name, ContainerID: c.id, State: s}
}

func sameState(a, b lifecycle.ProbeState) bool {
	if (a.Grace == nil) != (b.Grace == nil) || (a.Grace != nil && *a.Grace != *b.Grace) {
		return false
	}
	a.Grace, b.Grace = nil, nil
	return a == b
}
