package imagegc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/runtimetest"
)

const mib = 1 << 20

// failingStore refuses to remove one image.
type failingStore struct {
	*runtimetest.Images
	refuse string
}

func (s failingStore) RemoveImage(ctx context.Context, ref string) error {
	if ref == s.refuse {
		return fmt.Errorf("remove image %s: image is being used by a container: %w", ref, runtime.ErrConflict)
	}
	return s.Images.RemoveImage(ctx, ref)
}

type fixture struct {
	store  *runtimetest.Images
	clock  *clocktesting.FakeClock
	events *record.FakeRecorder
	usage  Usage
	inUse  map[string]bool
	m      *Manager
}

func newFixture(t *testing.T, p Policy, refuse string) *fixture {
	t.Helper()
	f := &fixture{store: runtimetest.NewImages(), clock: clocktesting.NewFakeClock(t0), events: record.NewFakeRecorder(10),
		usage: Usage{Capacity: 1000 * mib, Available: 500 * mib}, inUse: map[string]bool{}}
	var err error
	f.m, err = New(Config{Policy: p, Log: slog.New(slog.DiscardHandler), Images: failingStore{f.store, refuse}, NodeName: "n1", Recorder: f.events, Clock: f.clock,
		Usage: func(context.Context) (Usage, error) { return f.usage, nil },
		InUse: func(context.Context) (map[string]bool, error) { return f.inUse, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) add(id, tag string, size uint64, pinned bool) {
	f.store.AddLocal(tag, runtime.Image{ID: id, RepoTags: []string{tag}, Size: size, Pinned: pinned})
}

func (f *fixture) images(t *testing.T) []string {
	t.Helper()
	list, _ := f.store.ListImages(context.Background())
	var out []string
	for _, img := range list {
		out = append(out, img.ID)
	}
	slices.Sort(out)
	return out
}

func (f *fixture) event() string {
	select {
	case e := <-f.events.Events:
		return e
	default:
		return ""
	}
}

var defaults = Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}

// Over the high threshold, unused images go least recently used first
// until their sizes reach the low threshold; the image in use (named by
// tag), the pinned pause image and an image seen less than minAge ago stay.
func TestCollectFreesDownToLowThreshold(t *testing.T) {
	f := newFixture(t, defaults, "")
	f.add("sha256:busybox", "busybox:1", 5*mib, false)
	f.add("sha256:pause", "pause:3.10", 1*mib, true)
	f.add("sha256:old1", "old:1", 40*mib, false)
	f.add("sha256:old2", "old:2", 40*mib, false)
	f.add("sha256:old3", "old:3", 40*mib, false)
	f.inUse["busybox:1"] = true
	ctx := context.Background()
	if err := f.m.GarbageCollect(ctx); err != nil { // below the threshold: records only
		t.Fatal(err)
	}
	f.clock.Step(3 * time.Minute)
	f.add("sha256:fresh", "fresh:1", 100*mib, false) // first seen now
	f.usage.Available = 120 * mib                    // 88 % used: free 80 MiB
	if err := f.m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := f.images(t), []string{"sha256:busybox", "sha256:fresh", "sha256:old3", "sha256:pause"}; !slices.Equal(got, want) {
		t.Errorf("images left %v, want %v", got, want)
	}
	if e := f.event(); e != "" {
		t.Errorf("unexpected event %q", e)
	}
}

// Freeing too little is a FreeDiskSpaceFailed event with upstream's message,
// and the round fails; a second failed round in a row is ImageGCFailed.
func TestFreeDiskSpaceFailedThenImageGCFailed(t *testing.T) {
	f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80}, "")
	f.add("sha256:busybox", "busybox:1", 5*mib, false)
	f.add("sha256:small", "small:1", 3*mib, false)
	f.inUse["sha256:busybox"] = true
	f.usage.Available = 50 * mib // 95 % used
	err := f.m.GarbageCollect(context.Background())
	want := FreeDiskSpaceFailedMessage(95, 1000*mib, 3*mib)
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if e := f.event(); e != "Warning FreeDiskSpaceFailed "+want {
		t.Errorf("event %q", e)
	}
	if got := f.images(t); !slices.Equal(got, []string{"sha256:busybox"}) {
		t.Errorf("images left %v", got)
	}

	// Run: the first failed round is only logged, the second is an event.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { f.m.Run(ctx); close(done) }()
	var events []string
	for len(events) < 3 {
		if !f.clock.HasWaiters() {
			time.Sleep(time.Millisecond)
			continue
		}
		f.clock.Step(Period)
		select {
		case e := <-f.events.Events:
			events = append(events, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("events so far %q", events)
		}
	}
	cancel()
	<-done
	// Round 1: FreeDiskSpaceFailed; round 2: FreeDiskSpaceFailed, ImageGCFailed.
	if !strings.HasPrefix(events[0], "Warning FreeDiskSpaceFailed") || !strings.HasPrefix(events[1], "Warning FreeDiskSpaceFailed") ||
		events[2] != "Warning ImageGCFailed "+FreeDiskSpaceFailedMessage(95, 1000*mib, 0) {
		t.Errorf("events %q", events)
	}
}

// An image that cannot be removed does not stop the others; the round
// reports it.
func TestRemovalErrorGoesOn(t *testing.T) {
	f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80}, "sha256:stuck")
	f.add("sha256:stuck", "stuck:1", 500*mib, false)
	f.add("sha256:z-other", "other:1", 500*mib, false)
	f.usage.Available = 0
	err := f.m.GarbageCollect(context.Background())
	if err == nil || !errors.Is(err, runtime.ErrConflict) || !strings.Contains(err.Error(), "wanted to free 209715200 bytes, but freed 524288000") {
		t.Errorf("err = %v", err)
	}
	if got := f.images(t); !slices.Equal(got, []string{"sha256:stuck"}) {
		t.Errorf("images left %v", got)
	}
}

// imageMaximumGCAge: an image unused for longer goes whatever the usage,
// once the collector has run that long.
func TestMaximumAge(t *testing.T) {
	f := newFixture(t, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: time.Hour}, "")
	f.add("sha256:busybox", "busybox:1", 5*mib, false)
	f.add("sha256:idle", "idle:1", 5*mib, false)
	f.add("sha256:pause", "pause:1", 5*mib, true)
	f.inUse["busybox:1"] = true
	ctx := context.Background()
	f.clock.Step(time.Hour) // not past the maximum age yet
	if err := f.m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.images(t); len(got) != 3 {
		t.Fatalf("images left %v, want all three", got)
	}
	f.clock.Step(time.Second)
	if err := f.m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := f.images(t), []string{"sha256:busybox", "sha256:pause"}; !slices.Equal(got, want) {
		t.Errorf("images left %v, want %v", got, want)
	}
}
