// Package containergc decides, as the kubelet's container garbage
// collection, which dead container instances and pod sandboxes a node
// removes: with the kubelet's defaults, the newest dead instance of each
// container of a pod is kept (its logs are `kubectl logs --previous`, its
// state the container's lastState) and older ones go; everything dead of a
// pod the node no longer has goes; a sandbox goes once it is not ready, holds
// no container, and is not its pod's newest (or its pod is gone).
//
// Plan is pure; the agent's pod worker manager lists the runtime, asks
// Plan, and removes (podworker/containergc.go).
package containergc

import (
	"sort"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Period is the kubelet's ContainerGCPeriod.
const Period = time.Minute

// Policy is the kubelet's container GC policy (its deprecated flags
// --minimum-container-ttl-duration, --maximum-dead-containers-per-container
// and --maximum-dead-containers; not in KubeletConfiguration).
type Policy struct {
	// MinAge: an instance created less than this ago is kept.
	MinAge time.Duration
	// MaxPerPodContainer: dead instances kept per pod and container name;
	// negative: no limit.
	MaxPerPodContainer int
	// MaxContainers: dead instances kept on the node; negative: no limit.
	MaxContainers int
}

// DefaultPolicy is the kubelet's: no minimum age, one dead instance per
// container, no node-wide limit.
func DefaultPolicy() Policy { return Policy{MinAge: 0, MaxPerPodContainer: 1, MaxContainers: -1} }

// Removal is one container instance to remove.
type Removal struct {
	runtime.Status
	// Stop: its state is unknown, so it may still run; stop it first, as
	// upstream.
	Stop bool
}

// Result is what Plan removes: instances and sandboxes, oldest first.
type Result struct {
	Containers []Removal
	Sandboxes  []string
}

type unit struct{ pod, name string }

// Plan decides what to remove of the runtime's containers and sandboxes;
// pods holds the UIDs of the pods the node has (its pod workers' and those
// of instances an earlier agent left that are not resolved yet). Running
// instances and ready sandboxes are never removed.
func Plan(containers []runtime.Status, sandboxes []runtime.SandboxStatus, pods map[string]bool, p Policy, now time.Time) Result {
	var res Result
	removed := map[string]bool{}
	remove := func(list []runtime.Status) {
		for i := len(list) - 1; i >= 0; i-- { // oldest first: list is newest first
			res.Containers = append(res.Containers, Removal{Status: list[i], Stop: list[i].State == runtime.StateUnknown})
			removed[list[i].ID] = true
		}
	}

	all := map[unit][]runtime.Status{}
	var keys []unit
	for _, c := range containers {
		k := unit{c.PodUID, c.Name}
		if all[k] == nil {
			keys = append(keys, k)
		}
		all[k] = append(all[k], c)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pod != keys[j].pod {
			return keys[i].pod < keys[j].pod
		}
		return keys[i].name < keys[j].name
	})
	// Evictable: not running and created at least MinAge ago. An instance
	// created and not started is not counted among the dead: the newest
	// one is about to start (counting it, as upstream does, would remove
	// the newest dead instance in the moment between a restart's create
	// and its start); an older one will never start and goes.
	units := map[unit][]runtime.Status{}
	for _, k := range keys {
		newestFirst(all[k])
		for i, c := range all[k] {
			switch {
			case c.State == runtime.StateRunning || now.Sub(c.CreatedAt) < p.MinAge:
			case c.State == runtime.StateCreated && pods[k.pod] && i == 0:
			case c.State == runtime.StateCreated && pods[k.pod]:
				remove([]runtime.Status{c})
			default:
				units[k] = append(units[k], c)
			}
		}
	}

	// A pod the node no longer has: every dead instance goes.
	for _, k := range keys {
		if !pods[k.pod] {
			remove(units[k])
			delete(units, k)
		}
	}
	keepPerUnit := func(n int) {
		for _, k := range keys {
			if list := units[k]; len(list) > n {
				remove(list[n:])
				units[k] = list[:n]
			}
		}
	}
	if p.MaxPerPodContainer >= 0 {
		keepPerUnit(p.MaxPerPodContainer)
	}
	if p.MaxContainers >= 0 {
		total := 0
		for _, list := range units {
			total += len(list)
		}
		if total > p.MaxContainers {
			// An equal share per container (at least one), then the oldest
			// across the node, as upstream.
			keepPerUnit(max(1, p.MaxContainers/len(units)))
			var all []runtime.Status
			for _, k := range keys {
				all = append(all, units[k]...)
			}
			if len(all) > p.MaxContainers {
				newestFirst(all)
				remove(all[p.MaxContainers:])
			}
		}
	}

	// Sandboxes: active while ready or holding an instance not removed.
	holds := map[string]bool{}
	for _, c := range containers {
		if !removed[c.ID] {
			holds[c.SandboxID] = true
		}
	}
	byPod := map[string][]runtime.SandboxStatus{}
	var podUIDs []string
	for _, sb := range sandboxes {
		if byPod[sb.PodUID] == nil {
			podUIDs = append(podUIDs, sb.PodUID)
		}
		byPod[sb.PodUID] = append(byPod[sb.PodUID], sb)
	}
	sort.Strings(podUIDs)
	for _, uid := range podUIDs {
		list := byPod[uid]
		sort.SliceStable(list, func(i, j int) bool {
			return newer(list[i].CreatedAt, list[j].CreatedAt, list[i].Attempt, list[j].Attempt, list[i].ID, list[j].ID)
		})
		if pods[uid] {
			list = list[1:] // the pod's newest sandbox stays while the node has it
		}
		for i := len(list) - 1; i >= 0; i-- {
			if sb := list[i]; sb.State != runtime.SandboxReady && !holds[sb.ID] {
				res.Sandboxes = append(res.Sandboxes, sb.ID)
			}
		}
	}
	return res
}

// newestFirst sorts instances by creation, newest first (ties: the higher
// attempt, then the ID, so that the plan does not depend on list order).
func newestFirst(list []runtime.Status) {
	sort.SliceStable(list, func(i, j int) bool {
		return newer(list[i].CreatedAt, list[j].CreatedAt, list[i].Attempt, list[j].Attempt, list[i].ID, list[j].ID)
	})
}

func newer(a, b time.Time, attemptA, attemptB int32, idA, idB string) bool {
	if !a.Equal(b) {
		return a.After(b)
	}
	if attemptA != attemptB {
		return attemptA > attemptB
	}
	return idA > idB
}
