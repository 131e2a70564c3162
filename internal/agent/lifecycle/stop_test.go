package lifecycle

import (
	"math"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestNextTermination(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(10 * time.Second)
	deletion := func(g time.Duration) *Termination { return &Termination{Since: t0, Grace: g} }
	shutdown := &Termination{Since: t0, Grace: 20 * time.Second, Reason: "Terminated", Message: "node shutdown"}
	tests := []struct {
		name      string
		cur       *Termination
		req       StopRequest
		want      *Termination
		shortened bool
	}{
		{"a first deletion starts the grace clock now", nil, StopRequest{Grace: 30 * time.Second},
			&Termination{Since: now, Grace: 30 * time.Second}, false},
		{"a force delete is grace 0 (the stop path floors it)", nil, StopRequest{},
			&Termination{Since: now}, false},
		{"a negative grace counts as 0", nil, StopRequest{Grace: -time.Second},
			&Termination{Since: now}, false},
		{"the agent's first decision carries its reason", nil, StopRequest{Grace: 5 * time.Second, Reason: "Evicted", Message: "m"},
			&Termination{Since: now, Grace: 5 * time.Second, Reason: "Evicted", Message: "m"}, false},
		{"a second delete shorter than what is left shortens", deletion(60 * time.Second), StopRequest{Grace: 3 * time.Second},
			&Termination{Since: now, Grace: 3 * time.Second}, true},
		{"a second delete longer than what is left changes nothing", deletion(60 * time.Second), StopRequest{Grace: 55 * time.Second},
			deletion(60 * time.Second), false},
		{"a second delete equal to what is left changes nothing", deletion(60 * time.Second), StopRequest{Grace: 50 * time.Second},
			deletion(60 * time.Second), false},
		{"the agent takes over a deletion and keeps its earlier deadline", deletion(15 * time.Second), StopRequest{Grace: 30 * time.Second, Reason: "Terminated", Message: "m"},
			&Termination{Since: now, Grace: 5 * time.Second, Reason: "Terminated", Message: "m"}, false},
		{"the agent takes over a deletion with its own earlier deadline", deletion(60 * time.Second), StopRequest{Grace: 5 * time.Second, Reason: "Terminated", Message: "m"},
			&Termination{Since: now, Grace: 5 * time.Second, Reason: "Terminated", Message: "m"}, true},
		{"the agent takes over a deletion whose grace ran out: grace 0", deletion(5 * time.Second), StopRequest{Grace: 30 * time.Second, Reason: "Evicted"},
			&Termination{Since: now, Reason: "Evicted"}, false},
		{"a deletion does not replace the agent's decision", shutdown, StopRequest{Grace: 0},
			shutdown, false},
		{"a second agent decision does not replace the first", shutdown, StopRequest{Grace: 0, Reason: "Evicted"},
			shutdown, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, shortened := NextTermination(tc.cur, tc.req, now)
			if *got != *tc.want || shortened != tc.shortened {
				t.Errorf("NextTermination = %+v, shortened %v; want %+v, %v", *got, shortened, *tc.want, tc.shortened)
			}
		})
	}
}

func TestStopBudgets(t *testing.T) {
	tests := []struct {
		name                   string
		grace, spent           time.Duration
		wantBudget, wantKillAt time.Duration
	}{
		{"a force delete still gets 2 s", 0, 0, 2 * time.Second, 2 * time.Second},
		{"the grace period when longer", 30 * time.Second, 0, 30 * time.Second, 30 * time.Second},
		{"what the preStop hook left", 30 * time.Second, 10 * time.Second, 30 * time.Second, 20 * time.Second},
		{"a preStop that used it all up: 2 s on top", 30 * time.Second, 31 * time.Second, 30 * time.Second, 2 * time.Second},
		{"1 s grace is floored", time.Second, 0, 2 * time.Second, 2 * time.Second},
		{"a saturated grace stays huge", math.MaxInt64, time.Second, math.MaxInt64, math.MaxInt64 - time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PreStopBudget(tc.grace); got != tc.wantBudget {
				t.Errorf("PreStopBudget(%v) = %v, want %v", tc.grace, got, tc.wantBudget)
			}
			if got := KillAfter(tc.grace, tc.spent); got != tc.wantKillAt {
				t.Errorf("KillAfter(%v, %v) = %v, want %v", tc.grace, tc.spent, got, tc.wantKillAt)
			}
		})
	}
}

// The API bounds no grace period: a deletion with a huge one must be a very
// patient termination, not (wrapped to a negative Duration) an immediate kill.
func TestGracePeriodsSaturate(t *testing.T) {
	huge := int64(1) << 62
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		got  func(*v1.Pod) time.Duration
		want time.Duration
	}{
		{"deletion without grace", &v1.Pod{}, DeletionGrace, 0},
		{"deletion with 30s", &v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: ptr.To[int64](30)}}, DeletionGrace, 30 * time.Second},
		{"deletion with a huge grace", &v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: &huge}}, DeletionGrace, math.MaxInt64},
		{"pod grace default", &v1.Pod{}, PodGrace, 30 * time.Second},
		{"pod grace 7s", &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](7)}}, PodGrace, 7 * time.Second},
		{"pod grace huge", &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: &huge}}, PodGrace, math.MaxInt64},
	} {
		if got := tc.got(tc.pod); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUnroutedWait(t *testing.T) {
	optedIn := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{StopAfterUnroutedAnnotation: "true"}}}
	other := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{StopAfterUnroutedAnnotation: "yes"}}}
	for _, tc := range []struct {
		name     string
		pod      *v1.Pod
		wholePod bool
		grace    time.Duration
		want     time.Duration
	}{
		{"opted in, pod stopping", optedIn, true, 30 * time.Second, 15 * time.Second},
		{"opted in, force delete", optedIn, true, 0, 0},
		{"opted in, one container restarted", optedIn, false, 30 * time.Second, 0},
		{"not opted in", &v1.Pod{}, true, 30 * time.Second, 0},
		{"only \"true\" opts in", other, true, 30 * time.Second, 0},
		{"no pod", nil, true, 30 * time.Second, 0},
	} {
		if got := UnroutedWait(tc.pod, tc.wholePod, tc.grace); got != tc.want {
			t.Errorf("%s: UnroutedWait = %v, want %v", tc.name, got, tc.want)
		}
	}
}
