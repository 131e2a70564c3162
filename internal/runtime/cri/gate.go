package cri

import (
	"context"
	"sync"
)

// The gate bounds the CRI calls that make or unmake a pod's sandbox or
// containers (RunPodSandbox, CreateContainer, StartContainer; StopPodSandbox,
// RemovePodSandbox). Each costs the runtime a few hundred
// milliseconds of CPU (shim, runc, CNI plugins); a burst of pods started
// all at once shares the CPU among all of them, so that every pod becomes
// ready only near the end of the burst. Through the gate, calls of pods
// already under way go first (start before create before sandbox): pods
// become ready one after another, at the same overall rate.
//
// A pod's teardown (StopPodSandbox: its network; RemovePodSandbox) costs
// CPU as well and passes the gate before any creation: what it frees comes
// back first. StopContainer does not pass it: a stop waits out a grace period.
//
// Every fairEvery-th place goes to the call that has waited longest,
// whatever its stage: crash-looping pods restart their containers without
// end, and a new pod's sandbox must not wait behind them forever.

// stage orders the calls through the gate: a later stage goes first.
type stage int

const (
	stageSandbox stage = iota + 1
	stageCreate
	stageStart
	stageTeardown
	stages = stageTeardown
)

type gate struct {
	mu       sync.Mutex
	free     int
	waiting  [stages + 1][]waiter // by stage, each in arrival order
	arrivals uint64               // numbers the waiters
	handoffs int
}

type waiter struct {
	ch  chan struct{}
	seq uint64 // arrival number
}

// fairEvery: one place in fairEvery goes to the longest-waiting call.
const fairEvery = 4

// newGate lets n calls through at once; n <= 0 means no bound (nil gate).
func newGate(n int) *gate {
	if n <= 0 {
		return nil
	}
	return &gate{free: n}
}

// enter waits for a place for a call of stage s, or for ctx to end. The
// caller calls leave once the call returned, unless enter returned an error.
func (g *gate) enter(ctx context.Context, s stage) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	if g.free > 0 {
		g.free--
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.arrivals++
	g.waiting[s] = append(g.waiting[s], waiter{ch: ch, seq: g.arrivals})
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	for i, w := range g.waiting[s] {
		if w.ch == ch {
			g.waiting[s] = append(g.waiting[s][:i], g.waiting[s][i+1:]...)
			g.mu.Unlock()
			return ctx.Err()
		}
	}
	g.mu.Unlock()
	g.leave() // let through meanwhile: pass the place on
	return ctx.Err()
}

// leave hands the place to the longest waiting call of the latest stage,
// or, every fairEvery-th time, to the longest waiting call of any stage.
func (g *gate) leave() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	pick := 0
	for s := stages; s > 0 && pick == 0; s-- {
		if len(g.waiting[s]) > 0 {
			pick = int(s)
		}
	}
	if pick == 0 {
		g.free++
		return
	}
	g.handoffs++
	if g.handoffs%fairEvery == 0 {
		for s := stages; s > 0; s-- {
			if q := g.waiting[s]; len(q) > 0 && q[0].seq < g.waiting[pick][0].seq {
				pick = int(s)
			}
		}
	}
	q := g.waiting[pick]
	g.waiting[pick] = q[1:]
	close(q[0].ch)
}
