package hook

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func sleepHook(s int64) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: s}}
}

func errorsIsBudget(err error) bool { return errors.Is(err, ErrBudgetExceeded) }

// waitWaiters waits until n timers wait on the fake clock.
func waitWaiters(t *testing.T, fc *clocktesting.FakeClock, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for fc.Waiters() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d timers wait on the clock, want %d", fc.Waiters(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// §7: sleep with 0 seconds is allowed and returns at once.
func TestSleepZeroReturnsAtOnce(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	r := New(Config{Clock: fc})
	res := await(t, runAsync(context.Background(), r, PreStop, &v1.Container{Name: "c"}, "", sleepHook(0), 0), 5*time.Second)
	if res.err != nil {
		t.Fatalf("sleep 0: %q, %v", res.msg, res.err)
	}
}

// §7: sleep N waits exactly N seconds of the agent's clock.
func TestSleepWaitsItsSeconds(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	r := New(Config{Clock: fc})
	ch := runAsync(context.Background(), r, PreStop, &v1.Container{Name: "c"}, "", sleepHook(2), 0)
	waitWaiters(t, fc, 1)
	fc.Step(2*time.Second - time.Millisecond)
	notYet(t, ch, "before 2s")
	fc.Step(time.Millisecond)
	if res := await(t, ch, 5*time.Second); res.err != nil {
		t.Fatalf("sleep 2: %q, %v", res.msg, res.err)
	}
}

// A sleep beyond what a Duration holds (the API bounds it only by the
// grace period, itself unbounded) waits: it used to wrap negative and return
// at once.
func TestSleepHugeWaits(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	r := New(Config{Clock: fc})
	ch := runAsync(context.Background(), r, PreStop, &v1.Container{Name: "c"}, "", sleepHook(math.MaxInt64), 0)
	waitWaiters(t, fc, 1)
	fc.Step(100 * 365 * 24 * time.Hour)
	notYet(t, ch, "after 100 years")
}

// The same on the real clock: about 2 s.
func TestSleepWaitsItsSecondsOnTheRealClock(t *testing.T) {
	r := New(Config{})
	begin := time.Now()
	res := await(t, runAsync(context.Background(), r, PreStop, &v1.Container{Name: "c"}, "", sleepHook(2), 0), 10*time.Second)
	if res.err != nil {
		t.Fatalf("sleep 2: %q, %v", res.msg, res.err)
	}
	if d := res.at.Sub(begin); d < 2*time.Second || d > 5*time.Second {
		t.Errorf("sleep 2 took %v", d)
	}
}

// A cancelled context (the container is being killed) ends the sleep early, as upstream.
func TestSleepEndsWhenCancelled(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	r := New(Config{Clock: fc})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := runAsync(ctx, r, PreStop, &v1.Container{Name: "c"}, "", sleepHook(2), 0)
	waitWaiters(t, fc, 1)
	notYet(t, ch, "before it was cancelled")
	cancel()
	res := await(t, ch, 5*time.Second)
	want := `Sleep lifecycle hook (2) for Container "c" in Pod "p_ns(uid)" failed - error: container terminated before sleep hook finished`
	if res.err == nil || res.msg != want {
		t.Fatalf("got %q, %v; want %q", res.msg, res.err, want)
	}
}

// §8: a preStop sleep longer than the rest of the grace period is cut off at its budget.
func TestSleepPastItsBudgetIsCutOff(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	r := New(Config{Clock: fc})
	ch := runAsync(context.Background(), r, PreStop, &v1.Container{Name: "c"}, "", sleepHook(10), 3*time.Second)
	waitWaiters(t, fc, 2) // the budget and the sleep
	fc.Step(3*time.Second - time.Millisecond)
	notYet(t, ch, "before its budget")
	fc.Step(time.Millisecond)
	res := await(t, ch, 5*time.Second)
	if !errorsIsBudget(res.err) {
		t.Fatalf("err %v, want ErrBudgetExceeded", res.err)
	}
}
