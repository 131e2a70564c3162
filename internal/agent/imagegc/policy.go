// Package imagegc is the kubelet's image garbage collection: when the
// filesystem holding the runtime's images is fuller than the high threshold,
// unused images are removed, least recently used first, until it is below
// the low threshold; images unused for longer than the maximum age go
// whatever the usage. Images in use by a container and pinned images (the
// sandbox image) are never removed, nor images first seen less than the
// minimum age ago (one just pulled is about to be used).
//
// The decisions (which images, how much to free, the messages) are pure
// functions of this file; manager.go lists, measures and removes.
package imagegc

import (
	"fmt"
	"sort"
	"time"
)

// Policy is the KubeletConfiguration's image GC settings.
type Policy struct {
	// HighThresholdPercent: usage at or above it starts a collection.
	HighThresholdPercent int
	// LowThresholdPercent: what a collection frees down to.
	LowThresholdPercent int
	// MinAge: an image first seen less than this ago is kept.
	MinAge time.Duration
	// MaxAge: an image unused for longer is removed whatever the usage;
	// 0: never.
	MaxAge time.Duration
}

// Disabled: as the kubelet, a high threshold of 100 without a maximum age
// turns image GC off.
func (p Policy) Disabled() bool { return p.HighThresholdPercent >= 100 && p.MaxAge == 0 }

// Image is what the collector needs of an image the runtime has.
type Image struct {
	ID     string
	Names  []string // repo tags and digests
	Size   int64
	Pinned bool
}

// InUse says which images (by ID) the refs name: what containers give as
// their image, an ID, a repo digest or a tag.
func InUse(images []Image, refs map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, img := range images {
		if refs[img.ID] {
			out[img.ID] = true
			continue
		}
		for _, n := range img.Names {
			if refs[n] {
				out[img.ID] = true
				break
			}
		}
	}
	return out
}

type imageRecord struct {
	firstDetected time.Time
	lastUsed      time.Time // zero: never seen in use
	size          int64
	pinned        bool
}

// Records remember, across rounds, when each image was first seen and last
// seen in use. The zero value is ready to use; not safe for concurrent use.
type Records struct {
	m map[string]*imageRecord
}

// Detect records the images the runtime has now: a new one is first seen
// now, one in use is last used now, and images gone are forgotten.
func (r *Records) Detect(images []Image, inUse map[string]bool, now time.Time) {
	if r.m == nil {
		r.m = map[string]*imageRecord{}
	}
	seen := make(map[string]bool, len(images))
	for _, img := range images {
		seen[img.ID] = true
		rec := r.m[img.ID]
		if rec == nil {
			rec = &imageRecord{firstDetected: now}
			r.m[img.ID] = rec
		}
		if inUse[img.ID] {
			rec.lastUsed = now
		}
		rec.size, rec.pinned = img.Size, img.Pinned
	}
	for id := range r.m {
		if !seen[id] {
			delete(r.m, id)
		}
	}
}

// Forget drops a removed image.
func (r *Records) Forget(id string) { delete(r.m, id) }

// Candidate is an image the collector may remove.
type Candidate struct {
	ID            string
	Size          int64
	FirstDetected time.Time
	LastUsed      time.Time
}

// Unused returns the images neither in use nor pinned, in eviction order:
// least recently used first, ties (never used, or used in the same round)
// by first detection, as upstream; then by ID, so that the order is stable.
func (r *Records) Unused(inUse map[string]bool) []Candidate {
	out := make([]Candidate, 0, len(r.m))
	for id, rec := range r.m {
		if inUse[id] || rec.pinned {
			continue
		}
		out = append(out, Candidate{ID: id, Size: rec.size, FirstDetected: rec.firstDetected, LastUsed: rec.lastUsed})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.LastUsed.Equal(b.LastUsed) {
			return a.LastUsed.Before(b.LastUsed)
		}
		if !a.FirstDetected.Equal(b.FirstDetected) {
			return a.FirstDetected.Before(b.FirstDetected)
		}
		return a.ID < b.ID
	})
	return out
}

// TooOld splits candidates into those unused for longer than MaxAge and
// the rest (order kept). Nothing is too old before the collector has run
// for MaxAge since began (the agent's start): an image's last use is only
// known from then on, as upstream.
func TooOld(cands []Candidate, p Policy, now, began time.Time) (old, rest []Candidate) {
	if p.MaxAge == 0 || now.Sub(began) <= p.MaxAge {
		return nil, cands
	}
	for _, c := range cands {
		if now.Sub(c.LastUsed) > p.MaxAge {
			old = append(old, c)
		} else {
			rest = append(rest, c)
		}
	}
	return old, rest
}

// OldEnough keeps the candidates first seen at least MinAge ago (order kept).
func OldEnough(cands []Candidate, p Policy, now time.Time) []Candidate {
	var out []Candidate
	for _, c := range cands {
		if now.Sub(c.FirstDetected) >= p.MinAge {
			out = append(out, c)
		}
	}
	return out
}

// Usage is the image filesystem's size and what is left of it, in bytes.
type Usage struct {
	Capacity  int64
	Available int64
}

// ErrInvalidCapacity is upstream's error for a filesystem that reports no size.
var ErrInvalidCapacity = fmt.Errorf("invalid capacity 0 on image filesystem")

// SpaceToFree says how full the image filesystem is (in whole percent, as
// upstream rounds) and, at or above the high threshold, how many bytes to
// free to get down to the low one; 0 below it.
func SpaceToFree(u Usage, p Policy) (usagePercent int, toFree int64, err error) {
	if u.Available > u.Capacity {
		u.Available = u.Capacity
	}
	if u.Capacity <= 0 {
		return 0, 0, ErrInvalidCapacity
	}
	usagePercent = 100 - int(u.Available*100/u.Capacity)
	if usagePercent < p.HighThresholdPercent {
		return usagePercent, 0, nil
	}
	return usagePercent, u.Capacity*int64(100-p.LowThresholdPercent)/100 - u.Available, nil
}

// FreeDiskSpaceFailedMessage is the message of the node's
// FreeDiskSpaceFailed event (and of the round's error), in upstream's words.
func FreeDiskSpaceFailedMessage(usagePercent int, capacity, freed int64) string {
	return fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
		"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
		"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
		usagePercent, formatSize(capacity), freed)
}

// formatSize is upstream's: binary units, one decimal.
func formatSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	size, suffixes := float64(n)/unit, []string{"KiB", "MiB", "GiB", "TiB"}
	i := 0
	for size >= unit && i < len(suffixes)-1 {
		size /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", size, suffixes[i])
}
