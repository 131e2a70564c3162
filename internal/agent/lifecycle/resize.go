package lifecycle

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// In-place pod resize (KEP-1287, GA in 1.35), as the kubelet does it:
//
//	spec.containers[].resources changed (the resize subresource)
//	  → allocation: does the node have room? no: PodResizePending
//	    (Deferred, retried; Infeasible, never), yes: the new resources are
//	    allocated (status allocatedResources) and used by every new instance
//	  → actuation: each running container whose allocation differs from
//	    what it runs with is updated in place (PodResizeInProgress until
//	    all are), or, when its resizePolicy says RestartContainer for a
//	    changed resource, stopped and started again (restartCount + 1)
//
// Only cpu and memory of regular containers and sidecars are resizable
// (the API refuses the rest).

// Resize is what the worker knows of the pod's in-place resize.
type Resize struct {
	// Allocated are the resources allocated to each resizable container;
	// a container missing has its spec's (no resize was ever allocated).
	Allocated map[string]v1.ResourceRequirements
	// Actuated are the resources each container's Current instance runs
	// with; a container missing runs with its allocation (it was created
	// with it).
	Actuated map[string]v1.ResourceRequirements
	// Pending is set while the spec asks for resources that could not be
	// allocated.
	Pending *ResizePending
	// Error is why the last actuation failed; empty when it did not.
	Error string
	// InFlight: resizes are being carried out; none is planned meanwhile.
	InFlight bool
	// NotBefore: no resize is planned before then (the last one failed);
	// the plan wakes at it.
	NotBefore time.Time
}

// Retries of resizes: a deferred one is tried again this often (and
// whenever a pod leaves the node), as upstream's periodic retry; a failed
// actuation after ResizeErrorRetry.
const (
	ResizeDeferredRetry = 3 * time.Minute
	ResizeErrorRetry    = 10 * time.Second
)

// ResizePending is a PodResizePending condition: upstream's reason
// (Deferred: may fit later, retried; Infeasible: never on this node) and
// the admission's message.
type ResizePending struct {
	Reason, Message string
}

// Reasons of the kubelet's resize events.
const (
	EventResizeStarted    = "ResizeStarted"
	EventResizeCompleted  = "ResizeCompleted"
	EventResizeDeferred   = "ResizeDeferred"
	EventResizeInfeasible = "ResizeInfeasible"
	EventResizeError      = "ResizeError"
)

// AllocatedPod is pod with each resizable container's resources replaced by
// its allocation: what new instances and the pod's cgroup are made with.
// pod itself is not changed; it is returned as is when nothing differs.
func AllocatedPod(pod *v1.Pod, allocated map[string]v1.ResourceRequirements) *v1.Pod {
	if len(allocated) == 0 || !ResizeRequested(pod, allocated) {
		return pod
	}
	out := pod.DeepCopy()
	for _, list := range [][]v1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range list {
			// Only resizable containers have an allocation (AllocationOf).
			if r, ok := allocated[list[i].Name]; ok {
				list[i].Resources = *r.DeepCopy()
			}
		}
	}
	return out
}

// AllocationOf is what pod's spec asks of each resizable container: the
// allocation of a pod admitted (or resized) as it is.
func AllocationOf(pod *v1.Pod) map[string]v1.ResourceRequirements {
	out := map[string]v1.ResourceRequirements{}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; isSidecar(c) {
			out[c.Name] = *c.Resources.DeepCopy()
		}
	}
	for i := range pod.Spec.Containers {
		out[pod.Spec.Containers[i].Name] = *pod.Spec.Containers[i].Resources.DeepCopy()
	}
	return out
}

// ResizeRequested: pod's spec asks a resizable container for cpu or memory
// other than allocated.
func ResizeRequested(pod *v1.Pod, allocated map[string]v1.ResourceRequirements) bool {
	for name, want := range AllocationOf(pod) {
		if have, ok := allocated[name]; ok && !sameCPUAndMemory(want, have) {
			return true
		}
	}
	return false
}

// Reasons of PodResizePending, as upstream.
const (
	ReasonResizeDeferred   = v1.PodReasonDeferred
	ReasonResizeInfeasible = v1.PodReasonInfeasible
)

// ResizeVerdict turns the node's admission of the resized pod into the
// pending resize it leaves, as the kubelet's status manager does: a refusal
// is Deferred (the node may have room later), unless it is Infeasible.
// nil: allocate.
func ResizeVerdict(refusalReason, refusalMessage string) *ResizePending {
	switch refusalReason {
	case "":
		return nil
	case ReasonResizeInfeasible:
		return &ResizePending{Reason: ReasonResizeInfeasible, Message: refusalMessage}
	}
	return &ResizePending{Reason: ReasonResizeDeferred, Message: refusalMessage}
}

// sameCPUAndMemory compares what a resize can change (a missing value is
// zero), semantically: 1000m is 1.
func sameCPUAndMemory(a, b v1.ResourceRequirements) bool {
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		if !a.Requests[name].Equal(b.Requests[name]) || !a.Limits[name].Equal(b.Limits[name]) {
			return false
		}
	}
	return true
}

func (c *container) resizable() bool { return c.regular() || c.sidecar }

// allocated is what the container is allocated: its allocation, or its
// spec's resources.
func (p *podState) allocated(c *container) v1.ResourceRequirements {
	if c.resizable() {
		if r, ok := p.s.Resize.Allocated[c.name()]; ok {
			return r
		}
	}
	return c.spec.Resources
}

// actuated is what the container's Current instance runs with.
func (p *podState) actuated(c *container) v1.ResourceRequirements {
	if r, ok := p.s.Resize.Actuated[c.name()]; ok && c.resizable() {
		return r
	}
	return p.allocated(c)
}

// resizeDue: c runs with other resources than allocated, and is not busy.
func (p *podState) resizeDue(c *container) bool {
	cur := c.rec.Current
	return c.resizable() && cur != nil && cur.State == StateRunning && !c.busy() &&
		!sameCPUAndMemory(p.allocated(c), p.actuated(c))
}

// statusResources fills the container's resources in its status, as the
// kubelet: allocatedResources are the allocated requests; resources what
// a running instance runs with, else the allocation. A container never
// created has neither.
func (p *podState) statusResources(st *v1.ContainerStatus, c *container) {
	if c.rec.Current == nil {
		return
	}
	alloc := p.allocated(c)
	st.AllocatedResources = alloc.Requests.DeepCopy()
	res := alloc
	if c.rec.Current.State == StateRunning {
		res = p.actuated(c)
	}
	st.Resources = res.DeepCopy()
}

// planResize is the actuation of the allocation: each running container
// that runs with other resources than allocated is resized in place, or
// restarted when its resizePolicy asks for a restart for a resource that
// changed. Resizes that lower a container's resources come first, as
// upstream orders them, so that the pod stays within what it had.
func (p *podState) planResize() []Action {
	if p.s.Resize.InFlight {
		return nil
	}
	if nb := p.s.Resize.NotBefore; p.now.Before(nb) {
		p.wakeAt(nb)
		return nil
	}
	var restarts, lower, higher []Action
	for _, c := range p.containers {
		if !p.resizeDue(c) {
			continue
		}
		want, have := p.allocated(c), p.actuated(c)
		if restartFor(c.spec, want, have) {
			restarts = append(restarts, Action{Kind: ActionKill, Container: c.name(), Init: c.init,
				Grace: podGrace(p.pod), Resize: true,
				Message: fmt.Sprintf("Container %s resize requires restart", c.name())})
			continue
		}
		a := Action{Kind: ActionResize, Container: c.name(), Init: c.init, Resources: want.DeepCopy()}
		if lowers(want, have) {
			lower = append(lower, a)
		} else {
			higher = append(higher, a)
		}
	}
	return slices.Concat(restarts, lower, higher)
}

// restartFor: a resource that changed has resizePolicy RestartContainer
// (a resource without a policy is NotRequired).
func restartFor(spec *v1.Container, want, have v1.ResourceRequirements) bool {
	for _, pol := range spec.ResizePolicy {
		if pol.RestartPolicy != v1.RestartContainer {
			continue
		}
		n := pol.ResourceName
		if !want.Requests[n].Equal(have.Requests[n]) || !want.Limits[n].Equal(have.Limits[n]) {
			return true
		}
	}
	return false
}

// lowers: some cpu or memory value goes down.
func lowers(want, have v1.ResourceRequirements) bool {
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		if less(want.Requests[name], have.Requests[name]) || less(want.Limits[name], have.Limits[name]) {
			return true
		}
	}
	return false
}

func less(a, b resource.Quantity) bool { return a.Cmp(b) < 0 }

// resizeConditions are PodResizePending while the spec asks for what was
// not allocated, and PodResizeInProgress while an allocation is not
// actuated yet (with reason Error and the failure when actuating failed).
func (p *podState) resizeConditions(phase v1.PodPhase) []v1.PodCondition {
	if isTerminal(phase) || p.ending {
		return nil
	}
	var out []v1.PodCondition
	if pend := p.s.Resize.Pending; pend != nil {
		if pend.Reason == ReasonResizeDeferred {
			p.wakeAt(p.now.Add(ResizeDeferredRetry))
		}
		out = append(out, v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue,
			Reason: pend.Reason, Message: pend.Message})
	}
	inProgress := p.s.Resize.InFlight || !p.s.Resize.NotBefore.IsZero()
	for _, c := range p.containers {
		cur := c.rec.Current
		if c.resizable() && cur != nil && cur.State == StateRunning && !sameCPUAndMemory(p.allocated(c), p.actuated(c)) {
			inProgress = true
		}
		if c.rec.ResizeRestart {
			inProgress = true // stopped for the resize, not started again yet
		}
	}
	if inProgress {
		c := v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue}
		if e := p.s.Resize.Error; e != "" {
			c.Reason, c.Message = v1.PodReasonError, e
		}
		out = append(out, c)
	}
	return out
}

// setResizeConditions replaces the resize conditions of conds with now's;
// the end of PodResizeInProgress is the ResizeCompleted event.
func (p *podState) setResizeConditions(conds []v1.PodCondition, phase v1.PodPhase) ([]v1.PodCondition, []Event) {
	old := p.pod.Status.Conditions
	out := slices.DeleteFunc(conds, func(c v1.PodCondition) bool {
		return c.Type == v1.PodResizePending || c.Type == v1.PodResizeInProgress
	})
	now := p.resizeConditions(phase)
	for _, c := range now {
		out = append(out, stamp(c, p.pod, old, p.now))
	}
	var events []Event
	if was := conditionOf(old, v1.PodResizeInProgress); was != nil && conditionOf(now, v1.PodResizeInProgress) == nil && !p.ending && !isTerminal(phase) {
		events = append(events, Event{Type: v1.EventTypeNormal, Reason: EventResizeCompleted,
			Message: ResizeMessage("Pod resize completed", AllocatedPod(p.pod, p.s.Resize.Allocated), was.ObservedGeneration, "")})
	}
	return out, events
}

// ResizeMessage is upstream's resize event message: the prefix, then the
// pod's containers' resources, the generation and the error as JSON.
func ResizeMessage(prefix string, pod *v1.Pod, generation int64, errMsg string) string {
	type allocation struct {
		Name      string                  `json:"name"`
		Resources v1.ResourceRequirements `json:"resources,omitempty"`
	}
	summary := struct {
		InitContainers []allocation `json:"initContainers,omitempty"`
		Containers     []allocation `json:"containers,omitempty"`
		Generation     int64        `json:"generation"`
		Error          string       `json:"error,omitempty"`
	}{Generation: generation, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		summary.InitContainers = append(summary.InitContainers, allocation{c.Name, c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		summary.Containers = append(summary.Containers, allocation{c.Name, c.Resources})
	}
	b, err := json.Marshal(summary)
	if err != nil {
		return prefix
	}
	return prefix + ": " + string(b)
}
