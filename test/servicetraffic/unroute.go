package servicetraffic

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/cluster/serviceproxy"
)

// minSyncPeriod is kube-proxy's --min-sync-period, which podvisor leaves
// at upstream's default.
const minSyncPeriod = time.Second

// Flip is one readiness failure, timed from when the pod's readiness began
// failing.
type Flip struct {
	ToSlice time.Duration // until the Service's EndpointSlice showed the pod not ready
	ToRules time.Duration // until the node's proxy rules no longer routed to it
}

// Backend is a pod behind a Service whose readiness a caller can flip:
// SetHealth("fail") makes its readiness probe fail, SetHealth("ok") pass
// again (testserver's /healthz/fail and /healthz/ok).
type Backend struct {
	Client    kubernetes.Interface
	Mode      serviceproxy.Mode
	Namespace string
	Service   string
	Pod       string
	IP        netip.Addr
	SetHealth func(what string) error
}

// FlipOnce waits (a minute at most) until the backend is ready and routed,
// makes its readiness fail, times the EndpointSlice and the proxy rules
// following (a minute at most), then makes it pass again and waits until it
// is ready and routed once more.
func (b Backend) FlipOnce(ctx context.Context) (Flip, error) {
	// A pod just made ready may not be in the rules yet: timing from then
	// would count the rules' first sync as an instant unroute.
	if err := b.waitRouted(ctx); err != nil {
		return Flip{}, err
	}
	// kube-proxy syncs at most once per min-sync-period (1 s, upstream's
	// default): right after the sync that routed the pod, a failure would
	// wait out the rest of that second. Measured after it, as a failure
	// long after the last change of the Service meets the proxy.
	time.Sleep(minSyncPeriod + time.Second)
	if err := b.SetHealth("fail"); err != nil {
		return Flip{}, err
	}
	failing := time.Now()
	var sliceAt, rulesAt time.Time
	deadline := failing.Add(time.Minute)
	for (sliceAt.IsZero() || rulesAt.IsZero()) && time.Now().Before(deadline) {
		if sliceAt.IsZero() {
			if c, err := EndpointConditions(ctx, b.Client, b.Namespace, b.Service, b.Pod); err == nil && c != nil && !ptr.Deref(c.Ready, true) {
				sliceAt = time.Now()
			}
		}
		if rulesAt.IsZero() {
			if routed, err := serviceproxy.RoutesTo(ctx, b.Mode, b.IP); err == nil && !routed {
				rulesAt = time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if sliceAt.IsZero() || rulesAt.IsZero() {
		return Flip{}, fmt.Errorf("a minute after %s's readiness began failing: EndpointSlice not ready at %v, rules unrouted at %v", b.Pod, sliceAt, rulesAt)
	}
	flip := Flip{ToSlice: sliceAt.Sub(failing), ToRules: rulesAt.Sub(failing)}
	if err := b.SetHealth("ok"); err != nil {
		return flip, err
	}
	return flip, b.waitRouted(ctx)
}

// waitRouted waits, a minute at most, until the backend's endpoint is ready
// and the proxy's rules route to it.
func (b Backend) waitRouted(ctx context.Context) error {
	var last error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		c, err := EndpointConditions(ctx, b.Client, b.Namespace, b.Service, b.Pod)
		if err != nil || c == nil || !ptr.Deref(c.Ready, false) {
			last = fmt.Errorf("endpoint not ready (%v)", err)
			continue
		}
		routed, err := serviceproxy.RoutesTo(ctx, b.Mode, b.IP)
		if err == nil && routed {
			return nil
		}
		last = fmt.Errorf("ready, but not routed (%v)", err)
	}
	return fmt.Errorf("%s not ready and routed within a minute: %v", b.Pod, last)
}
