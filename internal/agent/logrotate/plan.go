// Package logrotate rotates container logs as the kubelet's container log
// manager does: a running container's log that reached MaxSize is renamed
// to "<log>.<YYYYMMDD-HHMMSS>" and the runtime reopens the log path; older
// rotated files are gzipped ("<name>.gz"); at most MaxFiles files are kept
// per log, the current one included, the oldest removed first.
//
// Plan decides (pure, from names, a size and a time); Manager looks at the
// files and carries the plan out.
package logrotate

import (
	"slices"
	"strings"
	"time"
)

const (
	// timestampFormat is the suffix of a rotated file, as upstream's.
	timestampFormat = "20060102-150405"
	compressSuffix  = ".gz"
	// tmpSuffix marks a compression in progress; one found later was
	// interrupted and is removed.
	tmpSuffix = ".tmp"
)

// Policy is the rotation policy of every container log on the node.
type Policy struct {
	// MaxSize is the size in bytes at which a log is rotated; negative:
	// never (as upstream's stub manager).
	MaxSize int64
	// MaxFiles is how many files a log may have, the current one and its
	// rotated ones together (at least 2).
	MaxFiles int
}

// Actions are what to do with one container's log files, in this order:
// remove, compress, then rotate.
type Actions struct {
	// Remove: leftovers of an interrupted compression, and the oldest
	// rotated files beyond the policy.
	Remove []string
	// Compress: rotated files kept but not compressed yet, each to
	// "<name>.gz" (the original removed once that is written).
	Compress []string
	// RotateTo, when not empty, is the name the current log is renamed to
	// before the runtime reopens the log path.
	RotateTo string
}

// Plan decides for the log at path, of size bytes, whose rotated files are
// rotated (the names "<path>.*" found beside it), at time now.
//
// As upstream: nothing happens below MaxSize; at or above, temporary files
// and uncompressed files whose ".gz" exists are removed, then the oldest
// rotated files so that MaxFiles-2 remain (the log being rotated and the new
// current log make MaxFiles), the remaining uncompressed ones are
// compressed (so only the newest rotated file stays plain, for a reader
// still finishing it), and the log is rotated. Unlike upstream, when a
// rotated file of the same second already exists the rotation waits for
// the next round: renaming over it would lose that file's lines.
func Plan(path string, size int64, rotated []string, now time.Time, p Policy) Actions {
	var a Actions
	if p.MaxSize < 0 || size < p.MaxSize {
		return a
	}
	var inUse []string
	for _, f := range rotated {
		if unused(f, rotated) {
			a.Remove = append(a.Remove, f)
		} else {
			inUse = append(inUse, f)
		}
	}
	// Timestamps sort as the names do: oldest first.
	slices.Sort(inUse)
	keep := max(p.MaxFiles-2, 0)
	if n := len(inUse) - keep; n > 0 {
		a.Remove = append(a.Remove, inUse[:n]...)
		inUse = inUse[n:]
	}
	for _, f := range inUse {
		if !strings.HasSuffix(f, compressSuffix) {
			a.Compress = append(a.Compress, f)
		}
	}
	to := path + "." + now.Format(timestampFormat)
	if !slices.Contains(rotated, to) && !slices.Contains(rotated, to+compressSuffix) {
		a.RotateTo = to
	}
	return a
}

// unused reports whether a rotated file is a leftover: a temporary file of a
// compression, or a file whose compressed copy is complete.
func unused(f string, all []string) bool {
	switch {
	case strings.HasSuffix(f, tmpSuffix):
		return true
	case strings.HasSuffix(f, compressSuffix):
		return false
	}
	return slices.Contains(all, f+compressSuffix)
}
