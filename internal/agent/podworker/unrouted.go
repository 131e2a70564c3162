package podworker

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/timeline"
)

// Unrouter waits until the node's service proxy sends no new connection to
// any of a pod's addresses, for at most max, and says whether one still did
// (serviceproxy.Routing).
type Unrouter interface {
	WaitUnrouted(ctx context.Context, ips []netip.Addr, max time.Duration) (still bool, err error)
}

// waitUnrouted holds the stop of a container of a pod that asked for it
// (lifecycle.UnroutedWait) until the node's proxy no longer sends the pod
// new connections, and records how long that took. It returns how long it
// waited: that time comes out of the container's grace period.
func (w *worker) waitUnrouted(ctx context.Context, pod *v1.Pod, container string, grace time.Duration) time.Duration {
	if w.m.cfg.Unrouter == nil {
		return 0
	}
	w.mu.Lock()
	wholePod := w.termination != nil
	var ips []netip.Addr
	if n := len(w.sandboxes); n > 0 {
		for _, s := range w.sandboxes[n-1].IPs {
			if a, err := netip.ParseAddr(s); err == nil {
				ips = append(ips, a)
			}
		}
	}
	w.mu.Unlock()
	max := lifecycle.UnroutedWait(pod, wholePod, grace)
	if max <= 0 || len(ips) == 0 {
		return 0
	}
	begin := w.m.cfg.Clock.Now()
	still, err := w.m.cfg.Unrouter.WaitUnrouted(ctx, ips, max)
	if err == nil && !still {
		// Connections the proxy sent before are answered first.
		if drain := min(lifecycle.UnroutedDrain, max-w.m.cfg.Clock.Since(begin)); drain > 0 {
			select {
			case <-w.m.cfg.Clock.After(drain):
			case <-ctx.Done():
			}
		}
	}
	took := w.m.cfg.Clock.Since(begin)
	e := timeline.Entry{Kind: timeline.KindSignal, Container: container, State: "unrouted",
		Message: fmt.Sprintf("the service proxy sends no new connection here; waited %v (%v of it for connections already made)", took.Round(time.Millisecond), lifecycle.UnroutedDrain)}
	switch {
	case err != nil:
		e.State, e.Message = "unrouted unknown", fmt.Sprintf("the service proxy's rules could not be read (%v); waited %v", err, took.Round(time.Millisecond))
		w.m.cfg.Log.Warn("stop after unrouted: rules not read; stopping now", "pod", pod.Namespace+"/"+pod.Name, "container", container, "err", err)
	case still:
		e.State, e.Message = "still routed", fmt.Sprintf("still routed after %v, half the grace period: stopping anyway", took.Round(time.Millisecond))
		w.m.cfg.Log.Info("stop after unrouted: still routed at half the grace period; stopping anyway", "pod", pod.Namespace+"/"+pod.Name, "container", container)
	default:
		w.m.cfg.Log.Info("stop after unrouted: the service proxy no longer routes to the pod", "pod", pod.Namespace+"/"+pod.Name, "container", container, "waited", took.Round(time.Millisecond))
	}
	w.record(pod, e)
	return took
}
