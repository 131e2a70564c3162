package probe

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/podvisor/podvisor/internal/agent/timeline"
)

// taskHeap orders scheduled probes by their next run.
type taskHeap []*task

func (h taskHeap) Len() int           { return len(h) }
func (h taskHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h taskHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *taskHeap) Push(x any) {
	t := x.(*task)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *taskHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// job is one due run handed to an executor.
type job struct {
	t  *task
	at time.Time // when it was due
}

// Run schedules and runs probes until ctx ends: one scheduler goroutine, a
// bounded pool of executors and one goroutine delivering OnUpdate calls. It
// returns once they all stopped.
func (m *Manager) Run(ctx context.Context) {
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range m.cfg.Workers {
		wg.Go(func() {
			for j := range jobs {
				m.execute(ctx, j)
			}
		})
	}
	wg.Go(func() { m.deliver(ctx) })
	m.schedule(ctx, jobs)
	close(jobs)
	wg.Wait()
}

// schedule pops due probes off the heap and hands them to the executors,
// sleeping on one timer set to the earliest next run.
func (m *Manager) schedule(ctx context.Context, jobs chan<- job) {
	timer := m.cfg.Clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var due []job
	for {
		m.mu.Lock()
		m.idle = false
		now := m.cfg.Clock.Now()
		due = due[:0]
		for len(m.queue) > 0 && !m.queue[0].next.After(now) {
			t := heap.Pop(&m.queue).(*task)
			t.running = true
			m.inflight.Add(1)
			due = append(due, job{t: t, at: t.next})
		}
		if len(due) == 0 {
			if len(m.queue) > 0 {
				timer.Reset(m.queue[0].next.Sub(now))
			}
			m.idle = true
		}
		m.mu.Unlock()

		if len(due) > 0 {
			// Blocks while every executor is busy: the delay shows up as
			// scheduling latency rather than unbounded goroutines.
			for i, j := range due {
				select {
				case jobs <- j:
				case <-ctx.Done():
					m.abandon(due[i:])
					return
				}
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		case <-m.wake:
		}
	}
}

// abandon returns runs that were popped but never handed out at shutdown.
func (m *Manager) abandon(jobs []job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range jobs {
		j.t.running = false
		m.inflight.Add(-1)
	}
}

// execute runs one probe and applies its result.
func (m *Manager) execute(ctx context.Context, j job) {
	defer m.inflight.Add(-1)
	t := j.t
	if m.cfg.ObserveDelay != nil {
		m.cfg.ObserveDelay(m.cfg.Clock.Since(j.at))
	}
	o := runWithRetries(ctx, t.action)

	m.mu.Lock()
	t.running = false
	if t.stopped || ctx.Err() != nil {
		m.mu.Unlock()
		return // removed, terminating or shutting down: the result is stale
	}
	c := t.c
	before := c.state
	lastResult, lastRun := t.last, t.run
	ungated := c.observe(t, o)
	flipped := t.last != lastResult
	now := m.cfg.Clock.Now()
	if !t.stopped {
		m.push(t, nextRun(j.at, t.timing.period, now))
	}
	m.ready(c, ungated, now)
	changed := !sameState(before, c.state)
	if changed {
		m.markDirty(c)
	}
	state := c.state
	m.mu.Unlock()

	m.record(c.ref, t.kind, o)
	if flipped && m.cfg.Timeline != nil {
		e := timeline.Entry{Kind: timeline.KindProbe, Container: c.name, State: t.kind.String() + " " + resultName(t.last)}
		if lastRun > 0 {
			e.Message = fmt.Sprintf("after %d %s", lastRun, resultName(lastResult))
		}
		m.cfg.Timeline.Record(timeline.Pod{Namespace: c.ref.Namespace, Name: c.ref.Name, UID: c.podUID}, e)
	}
	if changed {
		m.cfg.Log.Info("probe verdict changed", "pod", c.ref.Namespace+"/"+c.ref.Name, "container", c.name,
			"containerID", c.id, "probe", t.kind.String(), "started", state.Started, "ready", state.Ready, "unhealthy", state.Unhealthy)
	}
}

// resultName is how the timeline names a result.
func resultName(r result) string {
	switch r {
	case resultSuccess, resultWarning:
		return "success"
	case resultFailure:
		return "failure"
	}
	return "unknown"
}

// nextRun keeps a fixed rate from the previous due time; periods missed while
// the probe ran long are skipped, as a ticker drops ticks.
func nextRun(prev time.Time, period time.Duration, now time.Time) time.Time {
	next := prev.Add(period)
	if next.After(now) {
		return next
	}
	missed := now.Sub(prev) / period
	return prev.Add((missed + 1) * period)
}
