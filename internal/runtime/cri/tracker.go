package cri

import (
	"sync"

	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/eventqueue"
)

// tracker knows the last state seen of every container, from whichever
// source saw it first (the runtime's event stream, a relist, this
// runtime's own calls), and turns each advance to running or exited into
// one event. States only move forward, so a stale relist cannot take a
// container back, and two sources seeing the same exit make one event.
//
// Events are coalesced per container and queued without bound
// (eventqueue's PushLatest): a consumer that does not receive for a while
// gets, per container, one event with its latest state; an exit is never
// dropped.
type tracker struct {
	queue *eventqueue.Queue
	out   <-chan runtime.Event

	mu    sync.Mutex
	known map[string]*tracked
	gen   uint64 // incremented by each relist
}

type tracked struct {
	podUID, name string
	state        runtime.State
	gen          uint64 // the relist generation it was last seen in (or added during)
	// sandbox: a pod sandbox, whose state is StateRunning while ready and
	// StateExited once stopped; only the stop is an event.
	sandbox bool
}

func newTracker() *tracker {
	q := eventqueue.New()
	return &tracker{queue: q, out: q.Out(), known: map[string]*tracked{}}
}

// seed records states without making events: what the agent learns from
// List instead.
func (t *tracker) seed(id, podUID, name string, s runtime.State) {
	t.seedTracked(id, &tracked{podUID: podUID, name: name, state: s})
}

// observe records that container id is in state s, and queues an event if
// that is news: running or exited, later than the last state known.
func (t *tracker) observe(id, podUID, name string, s runtime.State) {
	t.record(id, podUID, name, s, false)
}

// observeSandbox records the state of sandbox id, and queues an event when
// it stopped.
func (t *tracker) observeSandbox(id, podUID string, ready bool) {
	t.record(id, podUID, "", sandboxTrackState(ready), true)
}

// seedSandbox records a sandbox's state without making an event.
func (t *tracker) seedSandbox(id, podUID string, ready bool) {
	t.seedTracked(id, &tracked{podUID: podUID, state: sandboxTrackState(ready), sandbox: true})
}

// sandboxTrackState is how a sandbox's readiness is tracked.
func sandboxTrackState(ready bool) runtime.State {
	if ready {
		return runtime.StateRunning
	}
	return runtime.StateExited
}

// seedTracked records c for id unless id is known, in the current relist
// generation.
func (t *tracker) seedTracked(id string, c *tracked) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.known[id]; !ok {
		c.gen = t.gen
		t.known[id] = c
	}
}

func (t *tracker) record(id, podUID, name string, s runtime.State, sandbox bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.known[id]
	if !ok {
		c = &tracked{podUID: podUID, name: name, gen: t.gen, sandbox: sandbox}
		t.known[id] = c
	}
	c.gen = max(c.gen, t.gen)
	if s <= c.state {
		return
	}
	c.state = s
	if s != runtime.StateExited && (sandbox || s != runtime.StateRunning) {
		return
	}
	// Queued under t.mu, so that events of one ID are queued in the order
	// their states were recorded.
	t.queue.PushLatest(runtime.Event{ID: id, PodUID: c.podUID, Name: c.name, State: s, Sandbox: c.sandbox})
}

// again queues one more event of container id in its current state: the
// agent reads its status once more.
func (t *tracker) again(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.known[id]
	if !ok || c.sandbox {
		return
	}
	t.queue.PushLatest(runtime.Event{ID: id, PodUID: c.podUID, Name: c.name, State: c.state})
}

// lookup returns what is known of container id.
func (t *tracker) lookup(id string) (podUID, name string, s runtime.State, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.known[id]
	if !ok {
		return "", "", runtime.StateUnknown, false
	}
	return c.podUID, c.name, c.state, true
}

// forget drops a removed container.
func (t *tracker) forget(id string) {
	t.mu.Lock()
	delete(t.known, id)
	t.mu.Unlock()
}

// beginRelist returns the generation of a relist about to list containers.
func (t *tracker) beginRelist() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	return t.gen
}

// endRelist forgets the containers the relist of generation gen did not
// observe, unless something else observed them since it began (created
// meanwhile).
func (t *tracker) endRelist(gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, c := range t.known {
		if c.gen < gen {
			delete(t.known, id)
		}
	}
}

func (t *tracker) close() { t.queue.Close() }
