package process

import (
	"sync"

	"github.com/podvisor/podvisor/internal/runtime"
)

// eventQueue hands events to the agent in order without ever blocking the
// sender: exit detection must not stall behind a slow consumer.
type eventQueue struct {
	out chan runtime.Event

	mu      sync.Mutex
	pending []runtime.Event
	kick    chan struct{} // capacity 1: "pending is not empty"
	stop    chan struct{}
}

func newEventQueue() *eventQueue {
	q := &eventQueue{out: make(chan runtime.Event), kick: make(chan struct{}, 1), stop: make(chan struct{})}
	go q.run()
	return q
}

func (q *eventQueue) push(ev runtime.Event) {
	q.mu.Lock()
	q.pending = append(q.pending, ev)
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

func (q *eventQueue) run() {
	for {
		select {
		case <-q.kick:
		case <-q.stop:
			return
		}
		for {
			q.mu.Lock()
			if len(q.pending) == 0 {
				q.mu.Unlock()
				break
			}
			ev := q.pending[0]
			q.pending = q.pending[1:]
			q.mu.Unlock()
			select {
			case q.out <- ev:
			case <-q.stop:
				return
			}
		}
	}
}

func (q *eventQueue) close() { close(q.stop) }
