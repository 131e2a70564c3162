package shutdown

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/node"
	"github.com/podvisor/podvisor/internal/agent/podworker"
)

// wait bounds every wait on the manager's goroutine (real time).
const wait = 15 * time.Second // a loaded CI machine once needed more than 5 s for a D-Bus round trip

// fakePods records terminations; a pod stops when the test says so.
type fakePods struct {
	pods []*v1.Pod

	mu      sync.Mutex
	calls   []termCall
	stopped map[types.UID]chan struct{}
	called  chan struct{}
}

type termCall struct {
	uid types.UID
	t   podworker.Termination
}

func newFakePods(pods ...*v1.Pod) *fakePods {
	f := &fakePods{pods: pods, stopped: map[types.UID]chan struct{}{}, called: make(chan struct{}, 100)}
	for _, p := range pods {
		f.stopped[p.UID] = make(chan struct{})
	}
	return f
}

func (f *fakePods) ActivePods() []*v1.Pod { return f.pods }

func (f *fakePods) TerminatePod(uid types.UID, t podworker.Termination) <-chan struct{} {
	f.mu.Lock()
	f.calls = append(f.calls, termCall{uid, t})
	ch := f.stopped[uid]
	f.mu.Unlock()
	f.called <- struct{}{}
	return ch
}

func (f *fakePods) stop(uid types.UID) { close(f.stopped[uid]) }

func (f *fakePods) terminated() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, strings.TrimPrefix(string(c.uid), "uid-"))
	}
	return out
}

// waitCalls waits until n pods in all were told to stop.
func (f *fakePods) waitCalls(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(wait)
	for len(f.terminated()) < n {
		select {
		case <-f.called:
		case <-deadline:
			t.Fatalf("terminated %v, want %d pods", f.terminated(), n)
		}
	}
}

type fakeNode struct {
	mu sync.Mutex
	rs []node.Readiness
}

func (n *fakeNode) SetReadiness(r node.Readiness) {
	n.mu.Lock()
	n.rs = append(n.rs, r)
	n.mu.Unlock()
}

func (n *fakeNode) history() []node.Readiness {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]node.Readiness(nil), n.rs...)
}

type fixture struct {
	m     *Manager
	pods  *fakePods
	node  *fakeNode
	clock *clocktesting.FakeClock
	rec   *record.FakeRecorder
	reg   *prometheus.Registry
	state string
}

func newFixture(t *testing.T, bands []Band, pods ...*v1.Pod) *fixture {
	t.Helper()
	f := &fixture{pods: newFakePods(pods...), node: &fakeNode{}, clock: clocktesting.NewFakeClock(time.Unix(1700000000, 0)),
		rec: record.NewFakeRecorder(100), reg: prometheus.NewRegistry(), state: filepath.Join(t.TempDir(), StateFileName)}
	var err error
	f.m, err = New(Config{Bands: bands, Pods: f.pods, Node: f.node, Recorder: f.rec, NodeName: "n1",
		StateFile: f.state, Metrics: f.reg, Clock: f.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// stepWhenWaiting advances the fake clock by d once the manager waits on it.
func (f *fixture) stepWhenWaiting(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !f.clock.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the manager never waited on the clock")
		}
		time.Sleep(time.Millisecond)
	}
	f.clock.Step(d)
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// §10: bands run from the lowest priority up; a band ends when its pods have
// stopped or its period has passed; bands with no pods are skipped at once.
func TestShutdownStopsBandsInOrder(t *testing.T) {
	bands := []Band{{0, 10 * time.Second}, {1000, 20 * time.Second}, {10000, 30 * time.Second}, {SystemCriticalPriority, 40 * time.Second}}
	def := testPod("default", nil, nil)
	mid := testPod("mid", ptr.To[int32](10000), nil)
	crit := testPod("critical", ptr.To(SystemCriticalPriority), nil)
	f := newFixture(t, bands, crit, mid, def)

	done, err := f.m.Shutdown("test")
	if err != nil {
		t.Fatal(err)
	}
	f.pods.waitCalls(t, 1)
	if got := f.pods.terminated(); got[0] != "default" {
		t.Fatalf("first band stopped %v, want [default]", got)
	}
	// The default pod ignores its signal: the band waits its full period,
	// then moves on past the empty 1000 band straight to 10000.
	f.stepWhenWaiting(t, 10*time.Second)
	f.pods.waitCalls(t, 2)
	if got := f.pods.terminated(); got[1] != "mid" {
		t.Fatalf("second stop was %v, want mid (the empty band 1000 is skipped)", got)
	}
	// The mid pod stops at once: no waiting for the band's period.
	f.pods.stop(mid.UID)
	f.pods.waitCalls(t, 3)
	if got := f.pods.terminated(); got[2] != "critical" {
		t.Fatalf("third stop was %v, want critical", got)
	}
	f.pods.stop(crit.UID)
	waitClosed(t, done, "the end of the shutdown")
	if got := f.pods.terminated(); len(got) != 3 {
		t.Fatalf("terminated %v", got)
	}
	if !f.m.ShuttingDown() {
		t.Error("after the last band the node must stay shutting down until cancelled")
	}
}

// §10: each pod gets min(band period, own grace) and ends Failed with the
// upstream reason, message and DisruptionTarget condition.
func TestShutdownTerminationOfEachPod(t *testing.T) {
	bands := []Band{{0, 10 * time.Second}, {SystemCriticalPriority, 10 * time.Second}}
	long := testPod("long", nil, ptr.To[int64](120))
	long.Generation = 4
	short := testPod("short", nil, ptr.To[int64](5))
	short.Generation = 4
	f := newFixture(t, bands, long, short)
	if _, err := f.m.Shutdown("test"); err != nil {
		t.Fatal(err)
	}
	f.pods.waitCalls(t, 2)
	f.pods.mu.Lock()
	defer f.pods.mu.Unlock()
	for _, c := range f.pods.calls {
		want := map[types.UID]time.Duration{long.UID: 10 * time.Second, short.UID: 5 * time.Second}[c.uid]
		if c.t.Grace != want {
			t.Errorf("%s: grace %v, want %v", c.uid, c.t.Grace, want)
		}
		if c.t.Reason != "Terminated" || c.t.Message != "Pod was terminated in response to imminent node shutdown." {
			t.Errorf("%s: reason %q message %q", c.uid, c.t.Reason, c.t.Message)
		}
		cond := c.t.Condition
		if cond == nil || cond.Type != v1.DisruptionTarget || cond.Status != v1.ConditionTrue ||
			cond.Reason != "TerminationByKubelet" || cond.Message != TerminateMessage || cond.ObservedGeneration != 4 {
			t.Errorf("%s: condition %+v", c.uid, cond)
		}
	}
}

// §10: during a shutdown the node is NotReady "node is shutting down" and new
// pods are rejected; a cancel makes it Ready and admits again, and starts no
// further band.
func TestShutdownCancel(t *testing.T) {
	bands := []Band{{0, 10 * time.Second}, {SystemCriticalPriority, 10 * time.Second}}
	def := testPod("default", nil, nil)
	crit := testPod("critical", ptr.To(SystemCriticalPriority), nil)
	f := newFixture(t, bands, def, crit)
	newPod := testPod("new", nil, nil)

	if st := f.m.Admit(newPod); st != nil {
		t.Fatalf("before shutdown: rejected %+v", st)
	}
	done, err := f.m.Shutdown("test")
	if err != nil {
		t.Fatal(err)
	}
	f.pods.waitCalls(t, 1)
	st := f.m.Admit(newPod)
	if st == nil || st.Phase != v1.PodFailed || st.Reason != "NodeShutdown" || st.Message != "Pod was rejected as the node is shutting down." {
		t.Fatalf("during shutdown: admission %+v", st)
	}
	if again, _ := f.m.Shutdown("test"); again != done {
		t.Error("a second Shutdown must join the first")
	}
	if !f.m.Cancel("test") {
		t.Fatal("Cancel returned false during a shutdown")
	}
	waitClosed(t, done, "the cancelled shutdown to end")
	if got := f.pods.terminated(); len(got) != 1 {
		t.Errorf("terminated %v after cancel; the critical band must not start", got)
	}
	if st := f.m.Admit(newPod); st != nil {
		t.Errorf("after cancel: rejected %+v", st)
	}
	want := []node.Readiness{{Ready: false, Message: "node is shutting down"}, {Ready: true}}
	if got := f.node.history(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("readiness %v, want %v", got, want)
	}
	if f.m.Cancel("test") {
		t.Error("a second Cancel must report nothing to cancel")
	}
	events := strings.Join(drain(f.rec.Events), "\n")
	for _, w := range []string{"Normal NodeShutdown Shutdown manager detected shutdown event", "Normal NodeShutdown Shutdown manager detected shutdown cancellation"} {
		if !strings.Contains(events, w) {
			t.Errorf("events %q lack %q", events, w)
		}
	}
}

func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

// §10: start and end are published as gauges and recorded in the state file,
// which a restarted agent reads back.
func TestShutdownStateAndMetrics(t *testing.T) {
	f := newFixture(t, []Band{{0, 10 * time.Second}}, testPod("p", nil, nil))
	start := f.clock.Now()
	done, _ := f.m.Shutdown("test")
	f.pods.waitCalls(t, 1)
	if got := testutil.ToFloat64(f.m.metrics.start); got != float64(start.Unix()) {
		t.Errorf("start gauge %v, want %v", got, start.Unix())
	}
	if got := testutil.ToFloat64(f.m.metrics.end); got != 0 {
		t.Errorf("end gauge %v during shutdown, want 0", got)
	}
	f.stepWhenWaiting(t, 10*time.Second)
	waitClosed(t, done, "the end of the shutdown")
	end := start.Add(10 * time.Second)
	var st State
	b, err := os.ReadFile(f.state)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil || !st.StartTime.Equal(start) || !st.EndTime.Equal(end) {
		t.Fatalf("state file %s: %+v, %v", b, st, err)
	}
	n, err := testutil.GatherAndCount(f.reg, "kubelet_graceful_shutdown_start_time_seconds", "kubelet_graceful_shutdown_end_time_seconds")
	if err != nil || n != 2 {
		t.Errorf("registry has %d of the gauges (%v)", n, err)
	}
	// A new manager (agent restart) publishes the recorded times.
	m2, err := New(Config{Bands: f.m.cfg.Bands, Pods: f.pods, Node: f.node, Recorder: f.rec, NodeName: "n1", StateFile: f.state, Clock: f.clock, Log: f.m.cfg.Log})
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m2.metrics.end); got != float64(end.Unix()) {
		t.Errorf("end gauge after restart %v, want %v", got, end.Unix())
	}
}

func TestShutdownNotConfigured(t *testing.T) {
	f := newFixture(t, nil)
	if _, err := f.m.Shutdown("test"); err != ErrNotConfigured {
		t.Fatalf("Shutdown without bands: %v", err)
	}
	rr := httptest.NewRecorder()
	f.m.Handler().ServeHTTP(rr, httptest.NewRequest(http.MethodPost, "/shutdown", nil))
	if rr.Code != http.StatusConflict || !strings.Contains(rr.Body.String(), "shutdownGracePeriod") {
		t.Errorf("POST without configuration: %d %q", rr.Code, rr.Body)
	}
}

// The agent API route behind `podvisor node shutdown|cancel`.
func TestShutdownHandler(t *testing.T) {
	f := newFixture(t, []Band{{0, 10 * time.Second}}, testPod("p", nil, nil))
	h := f.m.Handler()
	do := func(method string) (int, Status) {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest(method, "/shutdown", nil))
		var st Status
		_ = json.Unmarshal(rr.Body.Bytes(), &st)
		return rr.Code, st
	}
	if code, st := do(http.MethodGet); code != 200 || !st.Enabled || st.ShuttingDown {
		t.Fatalf("GET: %d %+v", code, st)
	}
	if code, st := do(http.MethodPost); code != http.StatusAccepted || !st.ShuttingDown || st.StartTime == nil {
		t.Fatalf("POST: %d %+v", code, st)
	}
	f.pods.waitCalls(t, 1)
	if code, st := do(http.MethodDelete); code != 200 || st.ShuttingDown {
		t.Fatalf("DELETE: %d %+v", code, st)
	}
	waitClosed(t, f.m.run.done, "the cancelled shutdown to end")
	if code, _ := do(http.MethodPut); code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT: %d", code)
	}
}
