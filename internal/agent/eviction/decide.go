package eviction

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Observation is one signal's measure: available and capacity in the
// signal's unit (bytes, inodes, pids).
type Observation struct {
	Available int64
	Capacity  int64
}

// Observations are the signals measured in one round; a missing signal is
// not evaluated.
type Observations map[Signal]Observation

// State is what one round remembers for the next, indexed by the position of
// a threshold in Settings.Thresholds. The zero value is a fresh start.
type State struct {
	firstObserved  map[int]time.Time                  // threshold met, since when
	conditionsSeen map[v1.NodeConditionType]time.Time // condition last observed
	met            []int                              // met past their grace, not yet reclaimed
}

// Decision is the outcome of one round.
type Decision struct {
	// Conditions are the pressure conditions to publish, in the order
	// MemoryPressure, DiskPressure, PIDPressure.
	Conditions []v1.NodeConditionType
	// Reclaim is the threshold to evict for, nil when nothing is due.
	Reclaim *Threshold
	// Resource is Reclaim's resource (memory, ephemeral-storage, inodes, pids).
	Resource v1.ResourceName
	// Met are the thresholds past their grace period (for the message).
	Met []Threshold
}

// Decide runs one round of upstream's synchronize: the thresholds met now,
// plus those met before whose minimum reclaim is not yet satisfied; a
// condition stays on for the transition period after it was last observed;
// a threshold acts once it has been met for its grace period; memory is
// reclaimed before anything else.
func Decide(s Settings, st State, obs Observations, now time.Time) (State, Decision) {
	all := make([]int, len(s.Thresholds))
	for i := range all {
		all[i] = i
	}
	met := thresholdsMet(s.Thresholds, all, obs, false)
	if len(st.met) > 0 {
		for _, i := range thresholdsMet(s.Thresholds, st.met, obs, true) {
			if !containsInt(met, i) {
				met = append(met, i)
			}
		}
	}

	next := State{firstObserved: map[int]time.Time{}, conditionsSeen: map[v1.NodeConditionType]time.Time{}}
	for _, i := range met {
		at, ok := st.firstObserved[i]
		if !ok {
			at = now
		}
		next.firstObserved[i] = at
	}
	for _, i := range met {
		next.conditionsSeen[signalCondition[s.Thresholds[i].Signal]] = now
	}
	for c, at := range st.conditionsSeen {
		if _, ok := next.conditionsSeen[c]; !ok {
			next.conditionsSeen[c] = at
		}
	}

	var d Decision
	for _, c := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		if at, ok := next.conditionsSeen[c]; ok && now.Sub(at) < s.PressureTransitionPeriod {
			d.Conditions = append(d.Conditions, c)
		}
	}
	for _, i := range met {
		if now.Sub(next.firstObserved[i]) >= s.Thresholds[i].GracePeriod {
			next.met = append(next.met, i)
		}
	}
	if len(next.met) == 0 {
		return next, d
	}
	order := append([]int(nil), next.met...)
	// Memory first, as upstream's byEvictionPriority; the rest in config order.
	sort.SliceStable(order, func(a, b int) bool {
		return s.Thresholds[order[a]].Signal == MemoryAvailable && s.Thresholds[order[b]].Signal != MemoryAvailable
	})
	for _, i := range order {
		d.Met = append(d.Met, s.Thresholds[i])
	}
	t := s.Thresholds[order[0]]
	d.Reclaim, d.Resource = &t, signalResource[t.Signal]
	return next, d
}

// thresholdsMet are the indices (among which) of thresholds whose signal is
// below the threshold, or below threshold + minimum reclaim when enforced.
func thresholdsMet(ts []Threshold, which []int, obs Observations, enforceMinReclaim bool) []int {
	var out []int
	for _, i := range which {
		t := ts[i]
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		q := t.Value.Of(o.Capacity)
		if enforceMinReclaim && t.MinReclaim != nil {
			q.Add(t.MinReclaim.Of(o.Capacity))
		}
		if q.Value() > o.Available {
			out = append(out, i)
		}
	}
	return out
}

// PodGrace is the grace period of a pod evicted for t, in seconds: 1 for a
// hard threshold, else evictionMaxPodGracePeriod capped by the pod's own.
func PodGrace(s Settings, t Threshold, pod *v1.Pod) int64 {
	if t.Hard() {
		return immediateGraceSeconds
	}
	g := s.MaxPodGracePeriodSeconds
	if tg := pod.Spec.TerminationGracePeriodSeconds; tg != nil {
		g = min(g, *tg)
	}
	return g
}

// immediateGraceSeconds is upstream's grace for hard and local storage evictions.
const immediateGraceSeconds = 1

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
