package images

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// Upstream's image pull back-off (kubernetes/kubernetes pkg/kubelet/kubelet.go
// imageBackOffPeriod, MaxImageBackOff): 10 s doubling to 300 s, forgotten
// after twice the maximum without a failure.
const (
	InitialPullBackOff = 10 * time.Second
	MaxPullBackOff     = 300 * time.Second
)

// pullBackOff is the back-off of failed pulls, per pod and image as written
// in the spec, with the last failure it holds back (upstream keeps it to
// show in ImagePullBackOff's message).
type pullBackOff struct {
	b *flowcontrol.Backoff // client-go's, which upstream uses; no jitter

	mu      sync.Mutex
	lastErr map[string]string
}

func newPullBackOff(clk clock.Clock) *pullBackOff {
	return &pullBackOff{
		b:       flowcontrol.NewFakeBackOff(InitialPullBackOff, MaxPullBackOff, clk), // "Fake": only that the clock is ours
		lastErr: map[string]string{},
	}
}

// backOffKey is upstream's "<pod UID>_<image>".
func backOffKey(pod types.UID, image string) string { return string(pod) + "_" + image }

// holding reports whether a pull of key must wait, and the failure that
// caused it ("" if forgotten).
func (p *pullBackOff) holding(key string) (lastErr string, ok bool) {
	if !p.b.IsInBackOffSinceUpdate(key, p.b.Clock.Now()) {
		p.mu.Lock()
		delete(p.lastErr, key) // the map cannot grow without bound
		p.mu.Unlock()
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr[key], true
}

// failed starts or doubles key's back-off and records why.
func (p *pullBackOff) failed(key, why string) {
	p.b.Next(key, p.b.Clock.Now())
	p.mu.Lock()
	p.lastErr[key] = why
	p.mu.Unlock()
}

// succeeded drops expired entries. A success does not reset key: upstream
// lets its back-off run out.
func (p *pullBackOff) succeeded() { p.b.GC() }

// delay is key's current back-off; 0 when none.
func (p *pullBackOff) delay(key string) time.Duration { return p.b.Get(key) }
