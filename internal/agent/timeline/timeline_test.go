package timeline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var web = Pod{Namespace: "ns", Name: "web", UID: "uid-web"}

func TestRecordKeepsOrderAndStampsTheTime(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 25, 1, 2, 3, 456_000_000, time.UTC))
	r, err := New(Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	r.Record(web, Entry{Kind: KindPhase, State: "Pending"})
	clk.SetTime(clk.Now().Add(7 * time.Millisecond))
	given := clk.Now().Add(-time.Hour)
	r.Record(web, Entry{Kind: KindEvent, Reason: "Started"}, Entry{Kind: KindEvent, Reason: "Old", Time: given})
	tl, ok := r.Get("ns", "web")
	if !ok || len(tl.Entries) != 3 {
		t.Fatalf("timeline %+v %v", tl, ok)
	}
	if d := tl.Entries[2].Time.Sub(tl.Entries[1].Time); d != 7*time.Millisecond {
		t.Errorf("entries %v apart, want 7ms", d)
	}
	// An entry with an earlier time of its own goes where it belongs.
	if !tl.Entries[0].Time.Equal(given) || tl.Entries[0].Reason != "Old" || tl.Entries[2].Reason != "Started" {
		t.Errorf("entries %+v, want Old (its own time, an hour earlier) first", tl.Entries)
	}
	if _, ok := r.Get("ns", "other"); ok {
		t.Error("a pod never recorded has a timeline")
	}
}

func TestBoundsPerPodAndPerNode(t *testing.T) {
	r, err := New(Config{PerPod: 10, NodeCap: 25})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 15 {
		r.Record(web, Entry{Kind: KindEvent, Message: strconv.Itoa(i)})
	}
	tl, _ := r.Get("ns", "web")
	if len(tl.Entries) != 10 || tl.Entries[0].Message != "5" || tl.Dropped != 5 {
		t.Fatalf("kept %d from %q, dropped %d; want the newest 10 from 5", len(tl.Entries), tl.Entries[0].Message, tl.Dropped)
	}
	other := Pod{Namespace: "ns", Name: "db", UID: "uid-db"}
	for range 10 {
		r.Record(other, Entry{Kind: KindEvent})
	}
	third := Pod{Namespace: "ns", Name: "cache", UID: "uid-cache"}
	for range 6 {
		r.Record(third, Entry{Kind: KindEvent})
	}
	total := 0
	for _, p := range r.Pods() {
		tl, _ := r.Get(p.Namespace, p.Name)
		total += len(tl.Entries)
	}
	if total > 25 {
		t.Errorf("%d entries kept, node cap 25", total)
	}
	if tl, _ := r.Get("ns", "cache"); len(tl.Entries) != 6 {
		t.Errorf("the smallest pod lost entries: %d", len(tl.Entries))
	}
}

func TestTimelinesSurviveARestartUntilForgotten(t *testing.T) {
	dir := t.TempDir()
	r, err := New(Config{Dir: dir, PerPod: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 { // past twice PerPod: the file is rewritten
		r.Record(web, Entry{Kind: KindEvent, Message: strconv.Itoa(i)})
	}
	code := int32(3)
	r.Record(web, Entry{Kind: KindContainer, Container: "c", State: "terminated", ExitCode: &code})
	r.Close() // files are written in the background
	// A crash while writing leaves a torn last line.
	f, err := os.OpenFile(filepath.Join(dir, "uid-web.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2026-`)
	f.Close()

	again, err := New(Config{Dir: dir, PerPod: 4})
	if err != nil {
		t.Fatal(err)
	}
	tl, ok := again.Get("ns", "web")
	if !ok || len(tl.Entries) != 4 || tl.UID != "uid-web" {
		t.Fatalf("after a restart: %+v %v", tl, ok)
	}
	lastEntry := tl.Entries[3]
	if lastEntry.Container != "c" || lastEntry.ExitCode == nil || *lastEntry.ExitCode != 3 || tl.Entries[0].Message != "17" {
		t.Errorf("after a restart: %+v", tl.Entries)
	}
	again.Forget("uid-web")
	if _, ok := again.Get("ns", "web"); ok {
		t.Error("forgotten, still there")
	}
	again.Close()
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("files left: %v", files)
	}
	// Keep drops the pods deleted while the agent was down, not those
	// recorded since it started.
	fourth, err := New(Config{Dir: dir, PerPod: 4})
	if err != nil {
		t.Fatal(err)
	}
	fourth.Record(web, Entry{Kind: KindEvent})
	fourth.Record(Pod{Namespace: "ns", Name: "db", UID: "uid-db"}, Entry{Kind: KindEvent})
	fourth.Close()
	third, err := New(Config{Dir: dir, PerPod: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close() // its writer must be done before the directory goes
	third.Record(Pod{Namespace: "ns", Name: "new", UID: "uid-new"}, Entry{Kind: KindEvent})
	third.Keep(map[types.UID]bool{"uid-db": true})
	if ps := third.Pods(); len(ps) != 2 || ps[0].UID != "uid-db" || ps[1].UID != "uid-new" {
		t.Errorf("kept %+v, want db and new", ps)
	}
}

func TestDiff(t *testing.T) {
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	waiting := func(r string) v1.ContainerState {
		return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: r}}
	}
	terminated := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}
	prev := v1.PodStatus{Phase: v1.PodPending,
		Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: waiting("ContainerCreating")}}}
	next := v1.PodStatus{Phase: v1.PodRunning,
		Conditions:        []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", State: running, Ready: true, Started: ptr.To(true), ContainerID: "x://1"}}}
	got := Diff(prev, next)
	want := []Entry{
		{Kind: KindPhase, State: "Running"},
		{Kind: KindCondition, Name: "Ready", State: "True"},
		{Kind: KindContainer, Container: "c", State: "running"},
		{Kind: KindReady, Container: "c", State: "true"},
		{Kind: KindStarted, Container: "c", State: "true"},
	}
	if a, b := mustJSON(t, got), mustJSON(t, want); a != b {
		t.Errorf("diff\n got %s\nwant %s", a, b)
	}
	if d := Diff(next, next); len(d) != 0 {
		t.Errorf("no change gave %+v", d)
	}
	// A crash and a restart between two statuses: both states are entries.
	crashed := *next.DeepCopy()
	crashed.ContainerStatuses[0].State, crashed.ContainerStatuses[0].Ready = terminated, false
	got = Diff(next, crashed)
	if len(got) != 2 || got[0].State != "terminated" || *got[0].ExitCode != 1 || got[1].Kind != KindReady {
		t.Errorf("crash: %s", mustJSON(t, got))
	}
	restarted := *next.DeepCopy()
	restarted.ContainerStatuses[0].ContainerID, restarted.ContainerStatuses[0].RestartCount = "x://2", 1
	if got := Diff(next, restarted); len(got) != 1 || got[0].State != "running" {
		t.Errorf("a new instance running: %s", mustJSON(t, got))
	}
}

func TestTraceHasATrackPerContainerAndASlicePerState(t *testing.T) {
	at := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	tl := Timeline{Namespace: "ns", Name: "web", Entries: []Entry{
		{Time: at, Kind: KindPhase, State: "Pending"},
		{Time: at.Add(10 * time.Millisecond), Kind: KindContainer, Container: "c", State: "waiting", Reason: "ContainerCreating"},
		{Time: at.Add(250 * time.Millisecond), Kind: KindContainer, Container: "c", State: "running"},
		{Time: at.Add(2 * time.Second), Kind: KindEvent, Reason: "Killing"},
	}}
	b, err := Trace(tl)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Name string `json:"name"`
			Ph   string `json:"ph"`
			Ts   int64  `json:"ts"`
			Dur  int64  `json:"dur"`
			Tid  int    `json:"tid"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	slices := map[string][2]int64{}
	threads := 0
	for _, e := range doc.TraceEvents {
		switch e.Ph {
		case "X":
			slices[e.Name] = [2]int64{e.Ts, e.Dur}
		case "M":
			if e.Name == "thread_name" {
				threads++
			}
		}
	}
	if threads != 2 {
		t.Errorf("%d tracks, want the pod's and c's", threads)
	}
	if s := slices["waiting (ContainerCreating)"]; s != [2]int64{10_000, 240_000} {
		t.Errorf("waiting slice %v, want at 10 ms for 240 ms", s)
	}
	if s := slices["running"]; s != [2]int64{250_000, 1_750_000} {
		t.Errorf("running slice %v, want from 250 ms to the last entry", s)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Events on a pod's container (probes use a reference with a field path)
// name the container; other objects' events are not the timeline's.
func TestEventsOfAContainerAndOfOtherObjects(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ev := Events{Next: record.NewFakeRecorder(10), Rec: r}
	ev.Eventf(&v1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web", UID: "uid-web", FieldPath: "spec.initContainers{setup}"},
		v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %s", "no")
	ev.Event(&v1.Node{}, v1.EventTypeNormal, "NodeReady", "ready")
	ev.Event(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web"}}, v1.EventTypeNormal, "Killing", "Stopping")
	tl, _ := r.Get("ns", "web")
	if len(tl.Entries) != 2 || tl.Entries[0].Container != "setup" || tl.Entries[0].Message != "Readiness probe failed: no" ||
		tl.Entries[1].Reason != "Killing" || tl.Entries[1].Container != "" {
		t.Errorf("entries %s", mustJSON(t, tl.Entries))
	}
	if ps := r.Pods(); len(ps) != 1 {
		t.Errorf("timelines %+v: a node's event made one", ps)
	}
}
