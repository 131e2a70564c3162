package cri

import (
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

func receive(t *testing.T, tr *tracker) runtime.Event {
	t.Helper()
	select {
	case ev := <-tr.out:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return runtime.Event{}
}

func noEvent(t *testing.T, tr *tracker) {
	t.Helper()
	select {
	case ev := <-tr.out:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestTrackerAnnouncesStartsAndExitsOnce(t *testing.T) {
	tr := newTracker()
	defer tr.close()
	tr.observe("c1", "u", "app", runtime.StateCreated)
	noEvent(t, tr)
	tr.observe("c1", "u", "app", runtime.StateRunning)
	if ev := receive(t, tr); ev != (runtime.Event{ID: "c1", PodUID: "u", Name: "app", State: runtime.StateRunning}) {
		t.Errorf("event %+v", ev)
	}
	tr.observe("c1", "u", "app", runtime.StateRunning) // the stream after the relist
	tr.observe("c1", "u", "app", runtime.StateExited)
	tr.observe("c1", "u", "app", runtime.StateExited)
	tr.observe("c1", "u", "app", runtime.StateRunning) // a stale relist
	if ev := receive(t, tr); ev.State != runtime.StateExited {
		t.Errorf("event %+v, want exited", ev)
	}
	noEvent(t, tr)
}

func TestTrackerKeepsExitsWhileNobodyReceives(t *testing.T) {
	tr := newTracker()
	defer tr.close()
	for _, id := range []string{"a", "b", "c"} {
		tr.observe(id, "u", id, runtime.StateRunning)
	}
	for _, id := range []string{"a", "b", "c"} {
		tr.observe(id, "u", id, runtime.StateExited)
	}
	// The first event may be already on its way out; the rest coalesce to
	// their latest state, so at most four events, the last three exits.
	var got []runtime.Event
	for len(got) < 3 || got[len(got)-1].ID != "c" {
		got = append(got, receive(t, tr))
	}
	exited := map[string]bool{}
	for _, ev := range got {
		if ev.State == runtime.StateExited {
			exited[ev.ID] = true
		}
	}
	if len(got) > 4 || len(exited) != 3 {
		t.Errorf("events %+v", got)
	}
}

func TestTrackerSeedAnnouncesNothing(t *testing.T) {
	tr := newTracker()
	defer tr.close()
	tr.seed("c1", "u", "app", runtime.StateExited)
	tr.observe("c1", "u", "app", runtime.StateExited)
	noEvent(t, tr)
}

func TestTrackerRelistForgetsOnlyWhatItDidNotSee(t *testing.T) {
	tr := newTracker()
	defer tr.close()
	tr.seed("gone", "u", "a", runtime.StateExited)
	tr.seed("kept", "u", "b", runtime.StateExited)
	gen := tr.beginRelist()
	tr.observe("kept", "u", "b", runtime.StateExited)
	tr.observe("new", "u", "c", runtime.StateCreated) // created while the relist listed
	tr.endRelist(gen)
	for id, want := range map[string]bool{"gone": false, "kept": true, "new": true} {
		if _, _, _, ok := tr.lookup(id); ok != want {
			t.Errorf("%s known: %v, want %v", id, ok, want)
		}
	}
}
