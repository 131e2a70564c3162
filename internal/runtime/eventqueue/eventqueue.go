// Package eventqueue is the one queue both runtimes hand their container
// and sandbox events to the agent through.
package eventqueue

import (
	"sync"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Queue delivers events to one consumer in the order they were pushed,
// without bound and without ever blocking the sender: exit detection must
// not stall behind a slow consumer, and no event is dropped.
type Queue struct {
	out  chan runtime.Event
	kick chan struct{} // capacity 1: "pending is not empty"
	stop chan struct{}
	once sync.Once

	mu      sync.Mutex
	pending []*runtime.Event // oldest first
	// latest is, by ID, the event PushLatest queued and the consumer has
	// not received yet: a later PushLatest replaces it in its place.
	latest map[string]*runtime.Event
}

// New starts a queue; Close stops it.
func New() *Queue {
	q := &Queue{
		out:    make(chan runtime.Event),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		latest: map[string]*runtime.Event{},
	}
	go q.run()
	return q
}

// Out is the channel the consumer receives from. It is never closed.
func (q *Queue) Out() <-chan runtime.Event { return q.out }

// Push queues ev after every event queued before: each one is delivered.
func (q *Queue) Push(ev runtime.Event) {
	q.mu.Lock()
	q.pending = append(q.pending, &ev)
	q.mu.Unlock()
	q.wake()
}

// PushLatest queues ev, or, while an event of the same ID that PushLatest
// queued is still waiting, replaces that one in its place: a consumer that
// does not receive for a while gets one event per ID, with the latest
// state, in the order the IDs first changed.
func (q *Queue) PushLatest(ev runtime.Event) {
	q.mu.Lock()
	if p, ok := q.latest[ev.ID]; ok {
		*p = ev
		q.mu.Unlock()
		return
	}
	p := &ev
	q.pending = append(q.pending, p)
	q.latest[ev.ID] = p
	q.mu.Unlock()
	q.wake()
}

func (q *Queue) wake() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Close stops delivering; events still queued are not delivered. Safe to
// call more than once.
func (q *Queue) Close() { q.once.Do(func() { close(q.stop) }) }

func (q *Queue) run() {
	for {
		select {
		case <-q.kick:
		case <-q.stop:
			return
		}
		for {
			ev, ok := q.next()
			if !ok {
				break
			}
			if q.closed() { // a closed queue delivers nothing, even to a waiting consumer
				return
			}
			select {
			case q.out <- ev:
			case <-q.stop:
				return
			}
		}
	}
}

func (q *Queue) closed() bool {
	select {
	case <-q.stop:
		return true
	default:
		return false
	}
}

// next takes the oldest pending event.
func (q *Queue) next() (runtime.Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return runtime.Event{}, false
	}
	p := q.pending[0]
	q.pending[0] = nil
	q.pending = q.pending[1:]
	if q.latest[p.ID] == p {
		delete(q.latest, p.ID)
	}
	return *p, true
}
