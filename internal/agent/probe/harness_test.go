package probe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// harness runs a Manager on a fake clock. step advances the clock only once
// the manager is quiet (scheduler waiting, no run in flight, updates
// delivered), then waits until it is quiet again: every run due by then has
// finished and been reported.
type harness struct {
	t       *testing.T
	m       *Manager
	clock   *testingclock.FakeClock
	rec     *record.FakeRecorder
	updates chan Update
	exec    *fakeExec
}

func newHarness(t *testing.T, mod ...func(*Config)) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		clock:   testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		rec:     record.NewFakeRecorder(10000),
		updates: make(chan Update, 10000),
		exec:    &fakeExec{calls: map[string]int{}},
	}
	cfg := Config{
		Exec:             h.exec.run,
		Recorder:         h.rec,
		Clock:            h.clock,
		OnUpdate:         func(u Update) { h.updates <- u },
		Log:              slog.New(slog.NewTextHandler(io.Discard, nil)),
		KubeMinorVersion: "1.36",
		Jitter:           func(p time.Duration) time.Duration { return p / 2 },
	}
	for _, f := range mod {
		f(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// settled reports that nothing is due, running or waiting to be delivered.
func (m *Manager) settled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.idle || m.inflight.Load() != 0 || len(m.wake) > 0 || len(m.dirty) > 0 || m.delivering || len(m.notify) > 0 {
		return false
	}
	return len(m.queue) == 0 || m.queue[0].next.After(m.cfg.Clock.Now())
}

func (h *harness) settle() {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !h.m.settled() {
		if time.Now().After(deadline) {
			h.t.Fatal("probe manager did not settle")
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (h *harness) step(d time.Duration) {
	h.t.Helper()
	h.settle()
	h.clock.Step(d)
	h.settle()
}

// add registers the first container of pod, started now, and settles.
func (h *harness) add(pod *v1.Pod, id string) {
	h.t.Helper()
	h.m.AddContainer(pod, &pod.Spec.Containers[0], id, h.clock.Now(), "127.0.0.1", false)
	h.settle()
}

// drainUpdates returns the updates delivered so far.
func (h *harness) drainUpdates() []Update {
	var out []Update
	for {
		select {
		case u := <-h.updates:
			out = append(out, u)
		default:
			return out
		}
	}
}

// lastUpdate fails unless at least one update was delivered, and returns the latest.
func (h *harness) lastUpdate() Update {
	h.t.Helper()
	us := h.drainUpdates()
	if len(us) == 0 {
		h.t.Fatal("no update delivered")
	}
	return us[len(us)-1]
}

func (h *harness) noUpdate() {
	h.t.Helper()
	if us := h.drainUpdates(); len(us) > 0 {
		h.t.Fatalf("unexpected updates: %+v", us)
	}
}

func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// fakeExec answers exec probes by command name: a script returns the result
// of the n-th call (from 1).
type fakeExec struct {
	mu      sync.Mutex
	calls   map[string]int
	scripts map[string]func(n int) ([]byte, int, error)
	block   map[string]chan struct{} // if set, a call waits for it to close
}

func (f *fakeExec) script(cmd string, s func(n int) ([]byte, int, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.scripts == nil {
		f.scripts = map[string]func(int) ([]byte, int, error){}
	}
	f.scripts[cmd] = s
}

func (f *fakeExec) count(cmd string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[cmd]
}

func (f *fakeExec) run(ctx context.Context, _ string, cmd []string, _ time.Duration) ([]byte, int, error) {
	f.mu.Lock()
	f.calls[cmd[0]]++
	n := f.calls[cmd[0]]
	s := f.scripts[cmd[0]]
	b := f.block[cmd[0]]
	f.mu.Unlock()
	if b != nil {
		select {
		case <-b:
		case <-ctx.Done():
			return nil, -1, ctx.Err()
		}
	}
	if s == nil {
		return nil, 0, nil
	}
	return s(n)
}

// results scripts a sequence such as "FFS" (Failure, Failure, Success); the
// last letter repeats.
func results(seq string) func(n int) ([]byte, int, error) {
	return func(n int) ([]byte, int, error) {
		c := seq[min(n, len(seq))-1]
		if c == 'S' {
			return []byte("ok"), 0, nil
		}
		return []byte(fmt.Sprintf("fail %d", n)), 1, nil
	}
}

func execProbe(cmd string, period int32, mod ...func(*v1.Probe)) *v1.Probe {
	p := &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{cmd}}},
		PeriodSeconds:    period,
		TimeoutSeconds:   1,
		SuccessThreshold: 1,
		FailureThreshold: 3,
	}
	for _, f := range mod {
		f(p)
	}
	return p
}

func testPod(c v1.Container) *v1.Pod {
	if c.Name == "" {
		c.Name = "app"
	}
	return &v1.Pod{
		ObjectMeta: metaFor("web"),
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{c}},
	}
}

var podSeq int

func metaFor(name string) (om metav1.ObjectMeta) {
	podSeq++
	om.Name, om.Namespace = name, "default"
	om.UID = types.UID(fmt.Sprintf("uid-%d", podSeq))
	return om
}

func hasEvent(events []string, want string) bool {
	for _, e := range events {
		if strings.Contains(e, want) {
			return true
		}
	}
	return false
}

func countEvents(events []string, want string) int {
	n := 0
	for _, e := range events {
		if strings.Contains(e, want) {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(200 * time.Microsecond)
	}
}
