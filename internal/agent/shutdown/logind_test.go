package shutdown

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/agent/shutdown/fakelogind"
)

func startBus(t *testing.T) *fakelogind.Bus {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Skip("dbus-daemon not installed (Debian package dbus)")
	}
	bus, err := fakelogind.StartBus(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Stop)
	return bus
}

// nextLock waits for the lock after the first n.
func nextLock(t *testing.T, l *fakelogind.Logind, n int) *fakelogind.Lock {
	t.Helper()
	lock, err := l.WaitLock(n, wait)
	if err != nil {
		t.Fatal(err)
	}
	return lock
}

type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// §10: the agent holds a delay lock; PrepareForShutdown(true) stops the pods
// and then releases it; PrepareForShutdown(false) cancels and takes it again.
// logind's InhibitDelayMaxSec shorter than the grace periods is a warning.
func TestLogindTrigger(t *testing.T) {
	bus := startBus(t)
	logind, err := fakelogind.Start(bus.Address, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer logind.Close()
	pod := testPod("p", nil, nil)
	f := newFixture(t, []Band{{0, 10 * time.Second}, {SystemCriticalPriority, 10 * time.Second}}, pod)
	ctx, cancel := context.WithCancel(context.Background())
	watching := make(chan struct{})
	go func() { f.m.WatchLogind(ctx, bus.Address); close(watching) }()

	lock := nextLock(t, logind, 0)
	if lock.What != "shutdown" || lock.Mode != "delay" || lock.Who != "podvisor" || lock.Why == "" {
		t.Errorf("lock %+v, want a delay lock on shutdown by podvisor", lock)
	}
	events := strings.Join(drain(f.rec.Events), "\n")
	if !strings.Contains(events, "Warning InhibitDelayTooShort") || !strings.Contains(events, "InhibitDelayMaxSec (5s)") {
		t.Errorf("no warning about the 5s inhibit delay in %q", events)
	}

	if err := logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	f.pods.waitCalls(t, 1)
	select {
	case <-lock.Released():
		t.Fatal("lock released before the pods stopped")
	default:
	}
	f.pods.stop(pod.UID)
	waitClosed(t, lock.Released(), "the lock to be released after the pods stopped")
	if !f.m.ShuttingDown() {
		t.Error("not shutting down after PrepareForShutdown(true)")
	}

	if err := logind.PrepareForShutdown(false); err != nil {
		t.Fatal(err)
	}
	again := nextLock(t, logind, 1)
	if f.m.ShuttingDown() {
		t.Error("still shutting down after PrepareForShutdown(false)")
	}
	cancel()
	waitClosed(t, watching, "WatchLogind to return")
	select {
	case <-again.Released():
	case <-time.After(wait):
		// Say what else was handed out: a third lock would mean the
		// agent took one more after the test's second.
		locks, _ := logind.Locks()
		t.Fatalf("timed out waiting for the lock to be released when the agent stops (%d locks handed out)", len(locks))
	}
}

// The inhibitor lock's descriptor is not inherited by the processes the
// agent starts: a copy in a shim would keep logind waiting. (Go receives
// descriptors close-on-exec, MSG_CMSG_CLOEXEC; this keeps it so.)
func TestLogindLockIsCloseOnExec(t *testing.T) {
	bus := startBus(t)
	logind, err := fakelogind.Start(bus.Address, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer logind.Close()
	f := newFixture(t, []Band{{0, 10 * time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.m.WatchLogind(ctx, bus.Address)
	lock := nextLock(t, logind, 0)
	// A child that lives on: with a copy of the descriptor, the lock could
	// not be released while it runs.
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	cancel()
	waitClosed(t, lock.Released(), "the lock to be released while a child started under it runs")
}

// Without logind on the bus: one line, and the command is the trigger.
func TestLogindAbsent(t *testing.T) {
	bus := startBus(t)
	f := newFixture(t, []Band{{0, 10 * time.Second}})
	var out syncLog
	f.m.cfg.Log = slog.New(slog.NewTextHandler(&out, nil))
	done := make(chan struct{})
	go func() { f.m.WatchLogind(context.Background(), bus.Address); close(done) }()
	waitClosed(t, done, "WatchLogind to give up")
	if got := strings.Count(out.String(), "\n"); got != 1 || !strings.Contains(out.String(), "podvisor node shutdown") {
		t.Errorf("log %q, want one line naming the command", out.String())
	}
}
