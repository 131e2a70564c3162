package podworker

import (
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/runtime"
)

// probeChange hands an instance to the prober, or takes it back.
type probeChange struct {
	add       bool
	container string
	status    runtime.Status
	adopted   bool
}

// probeChangesLocked finds instances that became running (postStart done) and
// are not probed yet, and probed instances that have exited.
func (w *worker) probeChangesLocked(pod *v1.Pod) []probeChange {
	if w.m.cfg.Prober == nil {
		return nil
	}
	var out []probeChange
	for name, cf := range w.containers {
		list := cf.instances
		for i, s := range list {
			current := i == len(list)-1
			f := w.factsOf(s.ID)
			switch {
			case current && s.State == runtime.StateRunning && !f.postStart && !f.probed:
				in := w.instanceLocked(name, s.ID)
				in.probed = true
				in.probe = &lifecycle.ProbeState{}
				out = append(out, probeChange{add: true, container: name, status: s, adopted: f.adopted})
			case f.probed && (s.State == runtime.StateExited || !current):
				w.instanceLocked(name, s.ID).probed = false
				out = append(out, probeChange{container: name, status: s})
			}
		}
	}
	return out
}

func (w *worker) applyProbeChanges(pod *v1.Pod, changes []probeChange, terminating bool) {
	p := w.m.cfg.Prober
	if p == nil {
		return
	}
	podIP := w.podIP()
	for _, ch := range changes {
		if !ch.add {
			p.RemoveContainer(ch.status.ID)
			continue
		}
		if c, ok := containerspec.Find(pod, ch.container); ok {
			p.AddContainer(pod, c, ch.status.ID, ch.status.StartedAt, podIP, ch.adopted)
		}
	}
	if terminating {
		p.SetTerminating(w.uid)
	}
}

func (w *worker) probeUpdate(container, containerID string, state lifecycle.ProbeState) {
	w.mu.Lock()
	f := w.instFacts[containerID]
	if f == nil || f.probe == nil || f.removed || f.container != container {
		w.mu.Unlock()
		return // a verdict on an instance that is already gone
	}
	*f.probe = state
	w.mu.Unlock()
	w.poke()
}
