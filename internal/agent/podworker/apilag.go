package podworker

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// The API server judges a node's requests made for a pod — the node
// authorizer ("no relationship found between node … and this object") and
// NodeRestriction ("node requested token bound to a pod scheduled on a
// different node", the pod not found) — from its own informer caches. Those
// can lag behind the watch that brought the pod to this agent, by seconds
// after a burst of deletions and creations (issue 18 item 7). Such a refusal
// says nothing about the pod and nothing will wake its worker when it ends:
// failing the mount left the container to the config-error retry 10 s later.
// So the request is repeated until the caches have caught up.

const (
	catchUpFirstDelay = 50 * time.Millisecond
	catchUpMaxDelay   = time.Second
	// catchUpLimit bounds the wait for a refusal that is not lag after all
	// (the request then fails as before); the lag seen is below a few seconds.
	catchUpLimit = 30 * time.Second
)

// refusedForLag: a refusal the API server's lagging view of pods explains.
func refusedForLag(err error) bool { return apierrors.IsForbidden(err) }

// untilCaughtUp runs req until it succeeds, fails in a way lagging does not
// explain, the pod's worker no longer wants its containers started, ctx ends
// or catchUpLimit passes; it returns req's last error.
func (m *Manager) untilCaughtUp(ctx context.Context, uid types.UID, what string, lagging func(error) bool, req func() error) error {
	err := req()
	if err == nil || !lagging(err) || !m.wantsStart(uid) {
		return err
	}
	m.cfg.Log.Info("API server refused a request for the pod, waiting for it to catch up", "pod", m.podName(uid), "request", what, "err", err)
	start := m.cfg.Clock.Now()
	delay := catchUpFirstDelay
	for attempt := 2; ; attempt++ {
		t := m.cfg.Clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C():
		}
		delay = min(2*delay, catchUpMaxDelay)
		if err = req(); err == nil {
			m.cfg.Log.Info("API server caught up with the pod", "pod", m.podName(uid), "request", what,
				"attempts", attempt, "waited", m.cfg.Clock.Since(start).Round(time.Millisecond))
			return nil
		}
		if !lagging(err) || !m.wantsStart(uid) || m.cfg.Clock.Since(start) >= catchUpLimit {
			return err
		}
	}
}

// wantsStart: the pod's worker exists and the pod is not being terminated.
func (m *Manager) wantsStart(uid types.UID) bool {
	w := m.worker(uid)
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.gone && !w.finished && w.termination == nil && w.pod.DeletionTimestamp == nil
}

func (m *Manager) podName(uid types.UID) string {
	if w := m.worker(uid); w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.pod.Namespace + "/" + w.pod.Name
	}
	return string(uid)
}
