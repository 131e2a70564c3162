package servicetraffic

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/serviceproxy"
)

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

// FlipOnce makes the backend's readiness fail, times the EndpointSlice and
// the proxy rules following (a minute at most), then makes it pass again
// and waits (a minute at most) until it is ready and routed once more.
func (b Backend) FlipOnce(ctx context.Context) (Flip, error) {
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
	var last error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		c, err := EndpointConditions(ctx, b.Client, b.Namespace, b.Service, b.Pod)
		if err != nil || c == nil || !ptr.Deref(c.Ready, false) {
			last = fmt.Errorf("endpoint not ready again (%v)", err)
			continue
		}
		routed, err := serviceproxy.RoutesTo(ctx, b.Mode, b.IP)
		if err == nil && routed {
			return flip, nil
		}
		last = fmt.Errorf("ready, but not routed again (%v)", err)
	}
	return flip, fmt.Errorf("a minute after %s's readiness passed again: %v", b.Pod, last)
}
