package eventqueue

import (
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// waitLimit bounds each receive: an event that never comes fails the test.
const waitLimit = 30 * time.Second

func receive(t *testing.T, q *Queue) runtime.Event {
	t.Helper()
	select {
	case ev := <-q.Out():
		return ev
	case <-time.After(waitLimit):
		t.Fatal("no event")
		return runtime.Event{}
	}
}

func expectNone(t *testing.T, q *Queue) {
	t.Helper()
	select {
	case ev := <-q.Out():
		t.Fatalf("unexpected event %+v", ev)
	default:
	}
}

// A sender is never blocked by a consumer that does not receive, and every
// pushed event arrives, in order.
func TestPushNeverBlocksAndKeepsEveryEventInOrder(t *testing.T) {
	q := New()
	defer q.Close()
	const n = 1000
	for i := range n {
		q.Push(runtime.Event{ID: "c", State: runtime.State(1 + i%3)})
	}
	for i := range n {
		if ev := receive(t, q); ev.State != runtime.State(1+i%3) {
			t.Fatalf("event %d: state %v, want %v", i, ev.State, runtime.State(1+i%3))
		}
	}
}

// PushLatest keeps one waiting event per ID, with the latest state, where
// the ID first queued.
func TestPushLatestCoalescesPerIDInPlace(t *testing.T) {
	q := New()
	defer q.Close()
	// Fill the queue while nobody receives: the first event may already be
	// taken by the queue's sender, so start with one that is not coalesced.
	q.Push(runtime.Event{ID: "first"})
	q.PushLatest(runtime.Event{ID: "a", State: runtime.StateRunning})
	q.PushLatest(runtime.Event{ID: "b", State: runtime.StateRunning})
	q.PushLatest(runtime.Event{ID: "a", State: runtime.StateExited})
	want := []runtime.Event{
		{ID: "first"},
		{ID: "a", State: runtime.StateExited},
		{ID: "b", State: runtime.StateRunning},
	}
	for i, w := range want {
		if ev := receive(t, q); ev != w {
			t.Fatalf("event %d = %+v, want %+v", i, ev, w)
		}
	}
	expectNone(t, q)
	// Once received, an ID's next event is queued anew.
	q.PushLatest(runtime.Event{ID: "a", State: runtime.StateExited, Sandbox: true})
	if ev := receive(t, q); ev != (runtime.Event{ID: "a", State: runtime.StateExited, Sandbox: true}) {
		t.Fatalf("event after delivery = %+v", ev)
	}
}

// Push never coalesces, even with an event PushLatest queued for the ID.
func TestPushDoesNotReplace(t *testing.T) {
	q := New()
	defer q.Close()
	q.Push(runtime.Event{ID: "first"})
	q.PushLatest(runtime.Event{ID: "a", State: runtime.StateRunning})
	q.Push(runtime.Event{ID: "a", State: runtime.StateExited})
	for i, w := range []runtime.State{runtime.StateUnknown, runtime.StateRunning, runtime.StateExited} {
		if ev := receive(t, q); ev.State != w {
			t.Fatalf("event %d = %+v, want state %v", i, ev, w)
		}
	}
}

// After Close nothing more is delivered, and a push does not block.
func TestCloseStopsDelivery(t *testing.T) {
	q := New()
	q.Close()
	q.Close()
	q.Push(runtime.Event{ID: "a"})
	q.PushLatest(runtime.Event{ID: "b"})
	select {
	case ev := <-q.Out():
		t.Fatalf("event after Close: %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
}
