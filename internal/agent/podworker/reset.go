package podworker

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/podref"
	"github.com/podvisor/podvisor/internal/runtime"
)

// resetContainer carries out lifecycle.ActionReset (RestartAllContainers,
// KEP-5532): the running instance is stopped without preStop and with the
// minimum grace, as upstream kills with a zero grace period, then every
// instance of the container is removed (logs stay until the pod goes), so
// that the core sees a container never tried and starts it afresh. A
// container with no instance only forgets its failed start.
func (w *worker) resetContainer(ctx context.Context, pod *v1.Pod, a lifecycle.Action) {
	w.mu.Lock()
	list := w.instancesOf(a.Container)
	cf := w.containerLocked(a.Container)
	if cf.stopping {
		w.mu.Unlock()
		return
	}
	ids := make([]string, 0, len(list))
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	cf.stopping = true
	w.mu.Unlock()
	go func() {
		defer w.poke()
		sctx := context.WithoutCancel(ctx) // a reset half done would leave the pod stuck
		rt := w.m.cfg.Runtime
		if n := len(list); n > 0 && list[n-1].State != runtime.StateExited {
			w.m.cfg.Recorder.Event(podref.Container(pod, a.Container), v1.EventTypeNormal, "Killing", a.Message)
			if err := rt.Containers.Stop(sctx, list[n-1].ID, lifecycle.MinStopGrace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				w.m.cfg.Log.Warn("stopping container for RestartAllContainers", "pod", pod.Namespace+"/"+pod.Name, "container", a.Container, "err", err)
			}
		}
		w.removeInstances(sctx, pod, ids)
		w.mu.Lock()
		for _, id := range ids {
			f := w.instanceLocked(a.Container, id)
			f.removed, f.postStart = true, false
		}
		// The container is as never tried: no instance (so no probe
		// verdict either), no waiting reason, no back-off.
		delete(w.backoff, a.Container)
		cf := w.containerLocked(a.Container)
		cf.instances, cf.waiting, cf.waitingSince, cf.stopping = nil, nil, time.Time{}, false
		w.mu.Unlock()
		w.m.cfg.Log.Info("container removed to restart all containers", "pod", pod.Namespace+"/"+pod.Name, "container", a.Container)
	}()
}
