package lifecycle

import "time"

// Crash-loop back-off (§4), per container of one pod UID. It follows
// upstream's flowcontrol.Backoff without jitter:
//   - a restart is held back while now - finishedAt < Delay;
//   - an entry whose LastUpdate is more than BackOffReset before finishedAt
//     is stale: the container ran long enough, the back-off starts over;
//   - each restart moves Delay on: InitialBackOff for a new or stale entry
//     (so the first restart after a crash is immediate, as upstream), else
//     doubled up to MaxBackOff.

// normalized fills zero fields with DefaultConfig's and lowers the initial
// delay to the cap when the cap is smaller.
func (c Config) normalized() Config {
	d := DefaultConfig()
	if c.InitialBackOff <= 0 {
		c.InitialBackOff = d.InitialBackOff
	}
	if c.MaxBackOff <= 0 {
		c.MaxBackOff = d.MaxBackOff
	}
	if c.BackOffReset <= 0 {
		c.BackOffReset = d.BackOffReset
	}
	c.InitialBackOff = min(c.InitialBackOff, c.MaxBackOff)
	return c
}

// waitingRetry is how long a start that failed before creating a container
// (rec.Waiting) waits before the next attempt: about upstream's pod worker
// back-off after a failed sync.
func (c Config) waitingRetry() time.Duration { return c.normalized().InitialBackOff }

// stale: the entry says nothing about a crash at finishedAt.
func (c Config) stale(e BackOffEntry, finishedAt time.Time) bool {
	return finishedAt.Sub(e.LastUpdate) > c.BackOffReset
}

// backOffUntil returns when a container that exited at finishedAt may be
// restarted, and the delay that applies; ok is false when it may restart now.
func (c Config) backOffUntil(e BackOffEntry, found bool, finishedAt, now time.Time) (until time.Time, ok bool) {
	if !found || c.stale(e, finishedAt) {
		return time.Time{}, false
	}
	until = finishedAt.Add(min(e.Delay, c.MaxBackOff))
	return until, now.Before(until)
}

// nextBackOff is the entry after a restart at now of a container that
// exited at finishedAt.
func (c Config) nextBackOff(e BackOffEntry, found bool, finishedAt, now time.Time) BackOffEntry {
	if !found || c.stale(e, finishedAt) {
		return BackOffEntry{Delay: c.InitialBackOff, LastUpdate: now}
	}
	return BackOffEntry{Delay: min(2*e.Delay, c.MaxBackOff), LastUpdate: now}
}
