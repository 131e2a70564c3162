package lifecycle

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Condition reasons (§5), as upstream spells them.
const (
	ReasonContainersNotInitialized = "ContainersNotInitialized"
	ReasonContainersNotReady       = "ContainersNotReady"
	ReasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
	ReasonPodCompleted             = "PodCompleted"
	ReasonPodFailed                = "PodFailed"
)

// ownedConditions are the condition types the agent computes; every other
// condition (DisruptionTarget, readiness gates, …) belongs to someone else
// and is kept as it is (§5). PodScheduled is the scheduler's until the pod is
// bound; then the kubelet owns it, as upstream, and rewrites it True with the
// generation it observed.
var ownedConditions = []v1.PodConditionType{
	v1.PodReadyToStartContainers,
	v1.PodInitialized,
	v1.ContainersReady,
	v1.PodReady,
	v1.PodScheduled,
}

func owned(t v1.PodConditionType) bool {
	for _, o := range ownedConditions {
		if o == t {
			return true
		}
	}
	return false
}

// conditions merges the agent's conditions into old (the published ones):
// others' conditions stay where they are and as they are; the agent's
// replace theirs in place or are appended in a fixed order.
// lastTransitionTime moves to now only when a condition's status changes.
func conditions(pod *v1.Pod, old []v1.PodCondition, phase v1.PodPhase, init, regular []v1.ContainerStatus, sandboxReady bool, now time.Time) []v1.PodCondition {
	cr := containersReadyCondition(pod, phase, init, regular)
	computed := map[v1.PodConditionType]v1.PodCondition{
		v1.PodReadyToStartContainers: readyToStartCondition(sandboxReady),
		v1.PodInitialized:            initializedCondition(pod, phase, init, regular),
		v1.ContainersReady:           cr,
		v1.PodReady:                  readyCondition(pod, old, cr),
		v1.PodScheduled:              scheduledCondition(),
	}
	for t, c := range computed {
		c.Type = t
		computed[t] = stamp(c, pod, old, now)
	}

	out := make([]v1.PodCondition, 0, len(old)+len(ownedConditions))
	seen := map[v1.PodConditionType]bool{}
	for _, o := range old {
		if c, ok := computed[o.Type]; ok {
			if !seen[o.Type] {
				out = append(out, c)
			}
			seen[o.Type] = true
			continue
		}
		out = append(out, *o.DeepCopy())
	}
	for _, t := range ownedConditions {
		if !seen[t] {
			out = append(out, computed[t])
		}
	}
	return out
}

// stamp fills what every condition the agent writes carries: the pod's
// generation it was computed from (observedGeneration, as upstream with
// PodObservedGenerationTracking, GA in 1.35) and a lastTransitionTime that
// moves to now only when the status changes.
func stamp(c v1.PodCondition, pod *v1.Pod, old []v1.PodCondition, now time.Time) v1.PodCondition {
	c.ObservedGeneration = pod.Generation
	c.LastTransitionTime = apiTime(now)
	if o := conditionOf(old, c.Type); o != nil {
		c.LastProbeTime = o.LastProbeTime
		if o.Status == c.Status {
			c.LastTransitionTime = o.LastTransitionTime
		}
	}
	return c
}

// scheduledCondition: a pod the agent handles is bound to its node.
func scheduledCondition() v1.PodCondition {
	return v1.PodCondition{Type: v1.PodScheduled, Status: v1.ConditionTrue}
}

func readyToStartCondition(sandboxReady bool) v1.PodCondition {
	if sandboxReady {
		return v1.PodCondition{Status: v1.ConditionTrue}
	}
	return v1.PodCondition{Status: v1.ConditionFalse}
}

// initializedCondition: all regular init containers completed and all
// sidecars started (§5). Once a regular container has run, the pod stays
// initialized while its sidecars restart, as upstream.
func initializedCondition(pod *v1.Pod, phase v1.PodPhase, init, regular []v1.ContainerStatus) v1.PodCondition {
	if phase == v1.PodSucceeded {
		return v1.PodCondition{Status: v1.ConditionTrue, Reason: ReasonPodCompleted}
	}
	for i := range regular {
		if hasStarted(&regular[i]) {
			return v1.PodCondition{Status: v1.ConditionTrue}
		}
	}
	var incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st := statusOf(init, c.Name)
		switch {
		case st == nil:
			incomplete = append(incomplete, c.Name)
		case isSidecar(c):
			if st.Started == nil || !*st.Started {
				incomplete = append(incomplete, c.Name)
			}
		case !st.Ready:
			incomplete = append(incomplete, c.Name)
		}
	}
	if len(incomplete) > 0 {
		return v1.PodCondition{
			Status:  v1.ConditionFalse,
			Reason:  ReasonContainersNotInitialized,
			Message: fmt.Sprintf("containers with incomplete status: %s", listOf(incomplete)),
		}
	}
	return v1.PodCondition{Status: v1.ConditionTrue}
}

// containersReadyCondition: every sidecar and regular container ready (§5).
// In a terminal phase it is False with PodCompleted or PodFailed, as the
// upstream kubelet of 1.36 reports.
func containersReadyCondition(pod *v1.Pod, phase v1.PodPhase, init, regular []v1.ContainerStatus) v1.PodCondition {
	switch phase {
	case v1.PodSucceeded:
		return v1.PodCondition{Status: v1.ConditionFalse, Reason: ReasonPodCompleted}
	case v1.PodFailed:
		return v1.PodCondition{Status: v1.ConditionFalse, Reason: ReasonPodFailed}
	}
	var unready []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if st := statusOf(init, c.Name); isSidecar(c) && (st == nil || !st.Ready) {
			unready = append(unready, c.Name)
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if st := statusOf(regular, c.Name); st == nil || !st.Ready {
			unready = append(unready, c.Name)
		}
	}
	if len(unready) > 0 {
		return v1.PodCondition{
			Status:  v1.ConditionFalse,
			Reason:  ReasonContainersNotReady,
			Message: fmt.Sprintf("containers with unready status: %s", listOf(unready)),
		}
	}
	return v1.PodCondition{Status: v1.ConditionTrue}
}

// readyCondition: ContainersReady and every readiness gate True (§5). A gate
// is the condition of that type as another party published it; a missing
// one counts as False.
func readyCondition(pod *v1.Pod, published []v1.PodCondition, containersReady v1.PodCondition) v1.PodCondition {
	if containersReady.Status != v1.ConditionTrue {
		return v1.PodCondition{Status: containersReady.Status, Reason: containersReady.Reason, Message: containersReady.Message}
	}
	var msgs []string
	for _, g := range pod.Spec.ReadinessGates {
		c := conditionOf(published, g.ConditionType)
		switch {
		case c == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType))
		case c.Status != v1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %s", g.ConditionType, c.Status))
		}
	}
	if len(msgs) > 0 {
		return v1.PodCondition{Status: v1.ConditionFalse, Reason: ReasonReadinessGatesNotReady, Message: strings.Join(msgs, ", ")}
	}
	return v1.PodCondition{Status: v1.ConditionTrue}
}

// listOf prints names as upstream does with %s on a []string: [a b].
func listOf(names []string) string { return "[" + strings.Join(names, " ") + "]" }

func statusOf(list []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func conditionOf(list []v1.PodCondition, t v1.PodConditionType) *v1.PodCondition {
	for i := range list {
		if list[i].Type == t {
			return &list[i]
		}
	}
	return nil
}
