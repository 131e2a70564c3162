package imagegc

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ids(cands []Candidate) []string {
	out := []string{}
	if len(cands) == 0 {
		return out
	}
	for _, c := range cands {
		out = append(out, c.ID)
	}
	return out
}

func TestInUseMatchesIDDigestOrTag(t *testing.T) {
	images := []Image{
		{ID: "sha256:a", Names: []string{"docker.io/library/busybox:latest", "docker.io/library/busybox@sha256:da"}},
		{ID: "sha256:b", Names: []string{"podvisor.test/testserver:1"}},
		{ID: "sha256:c", Names: []string{"registry.k8s.io/pause:3.10"}},
		{ID: "sha256:d"},
	}
	refs := map[string]bool{"docker.io/library/busybox@sha256:da": true, "podvisor.test/testserver:1": true, "sha256:d": true}
	got := InUse(images, refs)
	want := map[string]bool{"sha256:a": true, "sha256:b": true, "sha256:d": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("InUse = %v, want %v", got, want)
	}
}

// Unused: neither in use nor pinned, least recently used first, ties by
// first detection (upstream's byLastUsedAndDetected).
func TestUnusedOrder(t *testing.T) {
	var r Records
	// Round 1 at t0: a, b seen; a in use.
	r.Detect([]Image{{ID: "a", Size: 1}, {ID: "b", Size: 2}}, map[string]bool{"a": true}, t0)
	// Round 2: c, pause (pinned) and d (in use) appear; a still in use.
	r.Detect([]Image{{ID: "a", Size: 1}, {ID: "b", Size: 2}, {ID: "c", Size: 3}, {ID: "pause", Pinned: true}, {ID: "d"}},
		map[string]bool{"a": true, "d": true}, t0.Add(time.Minute))
	// Round 3: a no longer in use; d still.
	inUse := map[string]bool{"d": true}
	r.Detect([]Image{{ID: "a", Size: 1}, {ID: "b", Size: 2}, {ID: "c", Size: 3}, {ID: "pause", Pinned: true}, {ID: "d"}},
		inUse, t0.Add(2*time.Minute))
	got := r.Unused(inUse)
	// b and c were never used (zero lastUsed): b first seen earlier; a was last used at t0+1m.
	if want := []string{"b", "c", "a"}; !reflect.DeepEqual(ids(got), want) {
		t.Fatalf("Unused = %v, want %v", ids(got), want)
	}
	if got[2].LastUsed != t0.Add(time.Minute) || got[0].FirstDetected != t0 || got[1].FirstDetected != t0.Add(time.Minute) {
		t.Errorf("records: %+v", got)
	}
	// An image gone from the runtime is forgotten.
	r.Detect([]Image{{ID: "c", Size: 3}}, nil, t0.Add(3*time.Minute))
	if want := []string{"c"}; !reflect.DeepEqual(ids(r.Unused(nil)), want) {
		t.Errorf("after b and a went: %v, want %v", ids(r.Unused(nil)), want)
	}
}

func TestTooOld(t *testing.T) {
	cands := []Candidate{
		{ID: "never-used"}, // zero lastUsed
		{ID: "used-3h-ago", LastUsed: t0.Add(-3 * time.Hour)},
		{ID: "used-1h-ago", LastUsed: t0.Add(-time.Hour)},
	}
	for _, tc := range []struct {
		name   string
		maxAge time.Duration
		began  time.Time
		old    []string
	}{
		{"off", 0, t0.Add(-24 * time.Hour), []string{}},
		{"collector not running for maxAge yet", 2 * time.Hour, t0.Add(-time.Hour), []string{}},
		{"exactly maxAge since start: not yet", 2 * time.Hour, t0.Add(-2 * time.Hour), []string{}},
		{"unused longer than maxAge", 2 * time.Hour, t0.Add(-25 * time.Hour), []string{"never-used", "used-3h-ago"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, rest := TooOld(cands, Policy{MaxAge: tc.maxAge}, t0, tc.began)
			if len(old)+len(rest) != len(cands) || !reflect.DeepEqual(ids(old), append([]string{}, tc.old...)) {
				t.Errorf("old = %v, rest = %v; want old %v", ids(old), ids(rest), tc.old)
			}
		})
	}
}

// An image first seen less than MinAge ago is kept: it may have just been
// pulled for a container about to be created.
func TestOldEnough(t *testing.T) {
	cands := []Candidate{{ID: "seen-3m-ago", FirstDetected: t0.Add(-3 * time.Minute)},
		{ID: "seen-2m-ago", FirstDetected: t0.Add(-2 * time.Minute)}, {ID: "seen-1m-ago", FirstDetected: t0.Add(-time.Minute)}}
	got := OldEnough(cands, Policy{MinAge: 2 * time.Minute}, t0)
	if want := []string{"seen-3m-ago", "seen-2m-ago"}; !reflect.DeepEqual(ids(got), want) {
		t.Errorf("OldEnough = %v, want %v", ids(got), want)
	}
}

func TestSpaceToFree(t *testing.T) {
	p := Policy{HighThresholdPercent: 85, LowThresholdPercent: 80}
	for _, tc := range []struct {
		name    string
		u       Usage
		percent int
		toFree  int64
		err     error
	}{
		{"below high", Usage{Capacity: 1000, Available: 160}, 84, 0, nil},
		// Whole percent rounded down, as upstream: 15.9 % available is 85 % used.
		{"at high (rounded): down to low", Usage{Capacity: 1000, Available: 159}, 85, 41, nil},
		{"at high: down to low", Usage{Capacity: 1000, Available: 150}, 85, 50, nil},
		{"full", Usage{Capacity: 1000, Available: 0}, 100, 200, nil},
		{"available over capacity is capped", Usage{Capacity: 1000, Available: 2000}, 0, 0, nil},
		{"no capacity", Usage{}, 0, 0, ErrInvalidCapacity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			percent, toFree, err := SpaceToFree(tc.u, p)
			if percent != tc.percent || toFree != tc.toFree || !errors.Is(err, tc.err) {
				t.Errorf("SpaceToFree(%+v) = %d%%, %d, %v; want %d%%, %d, %v", tc.u, percent, toFree, err, tc.percent, tc.toFree, tc.err)
			}
		})
	}
}

func TestFreeDiskSpaceFailedMessage(t *testing.T) {
	got := FreeDiskSpaceFailedMessage(91, 10<<30+512<<20, 1234)
	want := "Insufficient free disk space on the node's image filesystem (91% of 10.5 GiB used). " +
		"Failed to free sufficient space by deleting unused images (freed 1234 bytes). " +
		"Investigate disk usage, as it could be used by active images, logs, volumes, or other data."
	if got != want {
		t.Errorf("message:\n got %q\nwant %q", got, want)
	}
	for n, want := range map[int64]string{512: "512 B", 1536: "1.5 KiB", 64 << 20: "64.0 MiB", 3 << 40: "3.0 TiB"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
