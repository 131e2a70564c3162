package podworker

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
)

// Termination is the agent's own decision to stop a pod (node shutdown,
// eviction): every container goes through the one stop path with Grace, and
// the pod ends Failed with Reason and Message unless it already Succeeded.
type Termination struct {
	Grace     time.Duration
	Reason    string
	Message   string
	Condition *v1.PodCondition // e.g. DisruptionTarget; added to the pod's conditions
}

// TerminatePod starts terminating a pod; the returned channel is closed once
// none of its containers runs any more. A pod the agent does not hold, or one
// already stopped, returns a closed channel.
func (m *Manager) TerminatePod(uid types.UID, t Termination) <-chan struct{} {
	w := m.worker(uid)
	if w == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	w.mu.Lock()
	if w.termination == nil || w.termination.Reason == "" {
		// Already being deleted: the earlier deadline wins, and stops in
		// flight are cut to it.
		var shortened bool
		w.termination, shortened = lifecycle.NextTermination(w.termination,
			lifecycle.StopRequest{Grace: t.Grace, Reason: t.Reason, Message: t.Message}, m.cfg.Clock.Now())
		if shortened && w.pod != nil {
			w.shortenStopsLocked(w.pod, w.termination.Grace)
		}
		if t.Condition != nil {
			w.extraConditions = append(w.extraConditions, *t.Condition)
		}
	}
	ch := w.stoppedCh()
	w.mu.Unlock()
	w.poke()
	return ch
}

// stoppedCh returns the channel closed when the worker sees nothing running
// after a termination; call with w.mu held.
func (w *worker) stoppedCh() <-chan struct{} {
	if w.stopped == nil {
		w.stopped = make(chan struct{})
		if w.finished {
			close(w.stopped)
		}
	}
	return w.stopped
}

// markStopped closes the stopped channel once.
func (w *worker) markStopped() {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.stoppedCh()
	select {
	case <-ch:
	default:
		close(w.stopped)
	}
}

// SetAdmission installs an extra admission check run before the resource
// checks (the shutdown manager rejects new pods with it); nil removes it.
func (m *Manager) SetAdmission(f func(pod *v1.Pod) *v1.PodStatus) {
	m.mu.Lock()
	m.extraAdmit = f
	m.mu.Unlock()
}

// ActivePods are the admitted pods that are not terminal (for shutdown).
func (m *Manager) ActivePods() []*v1.Pod { return m.activePods("") }
