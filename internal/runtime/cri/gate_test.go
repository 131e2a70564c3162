package cri

import (
	"context"
	"sync"
	"testing"
	"time"
)

// waitQueued waits until n calls of stage s wait at the gate.
func waitQueued(t *testing.T, g *gate, s stage, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		g.mu.Lock()
		k := len(g.waiting[s])
		g.mu.Unlock()
		if k == n {
			return
		}
	}
	t.Fatalf("%d calls of stage %d never queued", n, s)
}

func TestGateLetsTeardownsThenLaterStagesThroughFirst(t *testing.T) {
	g := newGate(1)
	ctx := context.Background()
	if err := g.enter(ctx, stageSandbox); err != nil {
		t.Fatal(err)
	}
	order := make(chan stage, 4)
	var wg sync.WaitGroup
	enter := func(s stage) {
		wg.Go(func() {
			if err := g.enter(ctx, s); err != nil {
				t.Error(err)
			}
			order <- s
			g.leave()
		})
		waitQueued(t, g, s, 1)
	}
	enter(stageSandbox)
	enter(stageCreate)
	enter(stageStart)
	enter(stageTeardown)
	g.leave()
	for _, want := range []stage{stageTeardown, stageStart, stageCreate, stageSandbox} {
		if got := <-order; got != want {
			t.Fatalf("stage %d went through, want %d (later stages first)", got, want)
		}
	}
	wg.Wait()
	if g.free != 1 {
		t.Errorf("free = %d after every call left, want 1", g.free)
	}
}

func TestGateKeepsArrivalOrderWithinAStage(t *testing.T) {
	g := newGate(1)
	ctx := context.Background()
	_ = g.enter(ctx, stageSandbox)
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			_ = g.enter(ctx, stageSandbox)
			order <- i
			g.leave()
		}()
		waitQueued(t, g, stageSandbox, i+1)
	}
	g.leave()
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("call %d went through, want %d (first come, first served)", got, want)
		}
	}
}

func TestGateCallGivingUpLeavesItsPlace(t *testing.T) {
	g := newGate(1)
	_ = g.enter(context.Background(), stageStart)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- g.enter(ctx, stageCreate) }()
	waitQueued(t, g, stageCreate, 1)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("enter returned nil after its context ended")
	}
	waitQueued(t, g, stageCreate, 0)
	g.leave()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.free != 1 {
		t.Errorf("free = %d, want 1: the call that gave up holds no place", g.free)
	}
}

func TestGateUnboundedWithoutALimit(t *testing.T) {
	var g *gate = newGate(-1)
	for range 100 {
		if err := g.enter(context.Background(), stageSandbox); err != nil {
			t.Fatal(err)
		}
	}
	g.leave()
}

// A sandbox waiting behind an endless stream of container creations (pods
// crash-looping) still gets through: every fairEvery-th place goes to the
// longest waiter.
func TestGateLetsALongWaitingSandboxThrough(t *testing.T) {
	g := newGate(1)
	ctx := context.Background()
	_ = g.enter(ctx, stageSandbox) // the place is taken
	got := make(chan string, 1)
	go func() {
		_ = g.enter(ctx, stageSandbox)
		got <- "sandbox"
	}()
	waitQueued(t, g, stageSandbox, 1)
	queueCreate := func() {
		go func() {
			_ = g.enter(ctx, stageCreate)
			got <- "create" // holds the place until the test leaves for it
		}()
		waitQueued(t, g, stageCreate, 1)
	}
	for handoff := 1; handoff <= 3*fairEvery; handoff++ {
		queueCreate() // a creation is always waiting
		g.leave()     // the holder leaves
		if who := <-got; who == "sandbox" {
			if handoff > fairEvery {
				t.Fatalf("the sandbox got through at handoff %d, want within %d", handoff, fairEvery)
			}
			return
		}
	}
	t.Fatalf("the sandbox never got through %d handoffs to waiting creations", 3*fairEvery)
}
