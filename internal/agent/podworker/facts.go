package podworker

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/runtime"
)

// containerFacts is what the worker records of one container (by name):
// its instances, the operation in flight on it and why it waits. One record
// per container, so that a container's facts are added and reset together
// and cannot fall out of step.
type containerFacts struct {
	instances    []runtime.Status // the runtime's status of each, oldest first
	starting     bool             // a start (create, start, postStart) is under way
	stopping     bool             // a stop or a reset is under way
	waiting      *v1.ContainerStateWaiting
	waitingSince time.Time
}

// instanceFacts is what the worker records of one instance (by runtime ID)
// beyond the runtime's status of it.
type instanceFacts struct {
	container string
	adopted   bool // found running when the worker started
	unstarted bool // found created but never started, until claimed for a start
	removed   bool // removed by a restart of all containers: late events are dropped
	postStart bool // the postStart hook has not returned yet
	// postStartCancel ends the postStart hook when the instance exits or the
	// pod terminates: a hook that never returns (sleep of a year, an exec
	// that hangs) must not hold up the pod's end.
	postStartCancel context.CancelFunc
	// preStopCancel ends the preStop hook of an instance being stopped, for
	// a second delete with a shorter grace.
	preStopCancel context.CancelFunc
	// probe is the prober's verdict, nil until the instance is handed to
	// the prober; probed says it is still handed (until it exits or a newer
	// instance replaces it).
	probe        *lifecycle.ProbeState
	probed       bool
	message      string // termination message, once messageRead
	messageRead  bool
	resizeKilled bool // stopped for an in-place resize that needs a restart
}

// containerLocked is the record of a container, made on first use. Call
// with w.mu held.
func (w *worker) containerLocked(name string) *containerFacts {
	f := w.containers[name]
	if f == nil {
		f = &containerFacts{}
		w.containers[name] = f
	}
	return f
}

// instancesOf is container's instances, oldest first; reading never makes a
// record. Call with w.mu held.
func (w *worker) instancesOf(name string) []runtime.Status {
	if f := w.containers[name]; f != nil {
		return f.instances
	}
	return nil
}

// hasInstancesLocked: some container of the pod has an instance. Call with
// w.mu held.
func (w *worker) hasInstancesLocked() bool {
	for _, f := range w.containers {
		if len(f.instances) > 0 {
			return true
		}
	}
	return false
}

// instanceLocked is the record of an instance of container, made on first
// use. Call with w.mu held.
func (w *worker) instanceLocked(container, id string) *instanceFacts {
	f := w.instFacts[id]
	if f == nil {
		f = &instanceFacts{container: container}
		w.instFacts[id] = f
	}
	return f
}

// factsOf is what is recorded of an instance, the zero record when nothing
// is; reading never makes a record. Call with w.mu held.
func (w *worker) factsOf(id string) instanceFacts {
	if f := w.instFacts[id]; f != nil {
		return *f
	}
	return instanceFacts{}
}

// containerFactsOf is what is recorded of a container, the zero record when
// nothing is. Call with w.mu held.
func (w *worker) containerFactsOf(name string) containerFacts {
	if f := w.containers[name]; f != nil {
		return *f
	}
	return containerFacts{}
}

// editInstance changes the record of an instance under w.mu, if there is
// one: the end of a hook must not bring back the record of an instance
// forgotten meanwhile.
func (w *worker) editInstance(id string, edit func(*instanceFacts)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.instFacts[id]; f != nil {
		edit(f)
	}
}
