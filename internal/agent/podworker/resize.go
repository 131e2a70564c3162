package podworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/agent/admission"
	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/podcgroup"
	"github.com/podvisor/podvisor/internal/host/durable"
	"github.com/podvisor/podvisor/internal/runtime"
)

// In-place resize, the shell's part (the decisions are lifecycle's,
// resize.go): the allocation and what each instance runs with are kept in
// the pod's directory, so that an agent restart neither resizes nor
// restarts what runs; the node's admission says whether a resize fits; the
// runtime and the pod's cgroup carry it out.

// resourcesFile is the pod's allocation and actuated resources, in its
// directory.
const resourcesFile = "resources.json"

// resourceRecord is resourcesFile.
type resourceRecord struct {
	// Allocated: by container (regular and sidecars).
	Allocated map[string]v1.ResourceRequirements `json:"allocated"`
	// Actuated: by container, what its instance ID runs with.
	Actuated map[string]actuatedResources `json:"actuated,omitempty"`
}

type actuatedResources struct {
	ID        string                  `json:"id"`
	Resources v1.ResourceRequirements `json:"resources"`
}

// resourcesLocked is the pod's record, read from its directory the first
// time (what an earlier agent allocated) or, for a pod new to the node,
// the spec's resources. Call with w.mu held.
func (w *worker) resourcesLocked() *resourceRecord {
	if w.resources != nil {
		return w.resources
	}
	rec := &resourceRecord{}
	err := durable.ReadJSON(filepath.Join(w.podDirLocked(), resourcesFile), rec)
	if err != nil || rec.Allocated == nil {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			w.m.cfg.Log.Warn("the pod's allocated resources cannot be read: the spec's are taken", "pod", w.pod.Namespace+"/"+w.pod.Name, "err", err)
		}
		rec = &resourceRecord{Allocated: lifecycle.AllocationOf(w.pod)}
	}
	if rec.Actuated == nil {
		rec.Actuated = map[string]actuatedResources{}
	}
	w.resources = rec
	return rec
}

func (w *worker) podDirLocked() string { return filepath.Join(w.m.cfg.PodsDir, podDirName(w.pod)) }

// saveResourcesLocked writes the record, atomically.
func (w *worker) saveResourcesLocked() {
	dir := w.podDirLocked()
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = writeJSONFile(filepath.Join(dir, resourcesFile), w.resources)
	}
	if err != nil {
		w.m.cfg.Log.Warn("recording the pod's allocated resources", "pod", w.pod.Namespace+"/"+w.pod.Name, "err", err)
	}
}

// allocatedPod is the pod as allocated (for the admission of other pods
// and of resizes: upstream counts allocations, not specs).
func (w *worker) allocatedPod() *v1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return lifecycle.AllocatedPod(w.pod, w.resourcesLocked().Allocated)
}

// handleResize allocates what the spec asks, when the node has room, or
// records why not (PodResizePending). Nothing is resized while the pod
// ends.
func (w *worker) handleResize(pod *v1.Pod) {
	w.mu.Lock()
	ending := w.termination != nil || w.lastPhase == v1.PodSucceeded || w.lastPhase == v1.PodFailed
	requested := !ending && lifecycle.ResizeRequested(pod, w.resourcesLocked().Allocated)
	if !requested {
		w.resizePending = nil
	}
	w.mu.Unlock()
	if !requested {
		return
	}
	// Admission outside w.mu: it reads every worker's allocation.
	reason, msg := w.m.admitResize(pod)
	verdict := lifecycle.ResizeVerdict(reason, msg)

	w.mu.Lock()
	defer w.mu.Unlock()
	if verdict != nil {
		if old := w.resizePending; old == nil || *old != *verdict || w.resizePendingGen != pod.Generation {
			reason := lifecycle.EventResizeDeferred
			if verdict.Reason == lifecycle.ReasonResizeInfeasible {
				reason = lifecycle.EventResizeInfeasible
			}
			w.m.cfg.Recorder.Event(pod, v1.EventTypeWarning, reason,
				lifecycle.ResizeMessage("Pod resize "+verdict.Reason, pod, pod.Generation, verdict.Message))
			w.m.cfg.Log.Info("pod resize pending", "pod", pod.Namespace+"/"+pod.Name, "reason", verdict.Reason, "message", verdict.Message)
		}
		w.resizePending, w.resizePendingGen = verdict, pod.Generation
		return
	}
	rec := w.resourcesLocked()
	// What runs now was made with the allocation it had: recorded before
	// the allocation changes.
	for name, r := range rec.Allocated {
		list := w.instancesOf(name)
		if len(list) == 0 {
			continue
		}
		if cur := list[len(list)-1]; rec.Actuated[name].ID != cur.ID {
			rec.Actuated[name] = actuatedResources{ID: cur.ID, Resources: r}
		}
	}
	rec.Allocated = lifecycle.AllocationOf(pod)
	w.saveResourcesLocked()
	w.resizePending, w.resizeErr, w.resizeNotBefore = nil, "", time.Time{}
	w.m.cfg.Recorder.Event(pod, v1.EventTypeNormal, lifecycle.EventResizeStarted,
		lifecycle.ResizeMessage("Pod resize started", pod, pod.Generation, ""))
	w.m.cfg.Log.Info("pod resize allocated", "pod", pod.Namespace+"/"+pod.Name, "generation", pod.Generation)
	go w.m.retryDeferredResizes(w.uid) // a smaller allocation may make room
}

// resizeSnapshotLocked is the resize part of the core's snapshot.
func (w *worker) resizeSnapshotLocked() lifecycle.Resize {
	rec := w.resourcesLocked()
	r := lifecycle.Resize{
		Allocated: rec.Allocated,
		Actuated:  map[string]v1.ResourceRequirements{},
		Pending:   w.resizePending,
		Error:     w.resizeErr,
		InFlight:  w.resizing,
		NotBefore: w.resizeNotBefore,
	}
	for name, a := range rec.Actuated {
		if list := w.instancesOf(name); len(list) > 0 && list[len(list)-1].ID == a.ID {
			r.Actuated[name] = a.Resources
		}
	}
	return r
}

// recordActuatedLocked notes what instance id of container name runs with.
func (w *worker) recordActuatedLocked(name, id string, r v1.ResourceRequirements) {
	rec := w.resourcesLocked()
	rec.Actuated[name] = actuatedResources{ID: id, Resources: *r.DeepCopy()}
	w.saveResourcesLocked()
}

// resizeContainers carries out the plan's in-place resizes, in their
// order (the pod's cgroup already holds the larger of the old and new
// limits: syncPodCgroup). A failure stops the rest: the
// core plans them again after ResizeErrorRetry, and PodResizeInProgress
// says why meanwhile.
func (w *worker) resizeContainers(ctx context.Context, pod *v1.Pod, actions []lifecycle.Action) {
	w.mu.Lock()
	if w.resizing {
		w.mu.Unlock()
		return
	}
	w.resizing = true
	ids := map[string]string{}
	for _, a := range actions {
		if list := w.instancesOf(a.Container); len(list) > 0 {
			ids[a.Container] = list[len(list)-1].ID
		}
	}
	snap := w.resizeSnapshotLocked()
	w.mu.Unlock()
	before := actuatedPod(pod, snap)
	go func() {
		defer w.poke()
		err := w.actuate(ctx, before, pod, actions, ids)
		w.mu.Lock()
		w.resizing = false
		if err != nil {
			w.resizeErr = err.Error()
			w.resizeNotBefore = w.m.cfg.Clock.Now().Add(lifecycle.ResizeErrorRetry)
		} else {
			w.resizeErr, w.resizeNotBefore = "", time.Time{}
		}
		w.mu.Unlock()
		if err != nil {
			w.m.cfg.Log.Warn("pod resize failed", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			w.m.cfg.Recorder.Event(pod, v1.EventTypeWarning, lifecycle.EventResizeError,
				lifecycle.ResizeMessage("Pod resize error", pod, pod.Generation, err.Error()))
		}
	}()
}

func (w *worker) actuate(ctx context.Context, before, pod *v1.Pod, actions []lifecycle.Action, ids map[string]string) error {
	limits := w.m.cfg.Runtime.Features.Limits
	if limits {
		// Before anything changes, as upstream: no half-done resize.
		if err := w.checkMemoryDecreases(ctx, before, actions, ids); err != nil {
			return err
		}
	}
	for _, a := range actions {
		c, ok := containerspec.Find(pod, a.Container)
		id := ids[a.Container]
		if !ok || id == "" {
			continue
		}
		spec := *c
		spec.Resources = *a.Resources
		if limits {
			if err := w.m.cfg.Runtime.Containers.UpdateResources(ctx, id, containerspec.Resources(&spec)); err != nil {
				if runtime.IsConflict(err) && !w.isRunning(a.Container, id) {
					continue // it exited meanwhile: its next instance gets the allocation
				}
				return fmt.Errorf("container %q: %w", a.Container, err)
			}
		}
		w.mu.Lock()
		w.recordActuatedLocked(a.Container, id, *a.Resources)
		w.mu.Unlock()
	}
	return nil
}

// syncPodCgroup keeps the pod's cgroup at the larger of what its running
// containers were given and what they are allocated: grown before any
// container is resized or restarted bigger (a child's CFS quota above its
// parent's is refused), shrunk once none runs with more than allocated.
// Written only when that changes (and once after an agent restart, with
// the same values). Before the pod's first sandbox there is no cgroup.
func (w *worker) syncPodCgroup(pod *v1.Pod, r lifecycle.Resize) {
	cg := w.m.cfg.Cgroups
	w.mu.Lock()
	made := len(w.sandboxes) > 0
	applied := w.podCgroupLimits
	w.mu.Unlock()
	if cg == nil || !made {
		return
	}
	qos := lifecycle.QOSClass(pod)
	want := podcgroup.Larger(podcgroup.Config(actuatedPod(pod, r), qos), podcgroup.Config(pod, qos))
	if applied != nil && *applied == want {
		return
	}
	if err := cg.Ensure(podcgroup.Parent(string(pod.UID), qos), want); err != nil {
		w.m.cfg.Log.Warn("resizing the pod's cgroup", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	w.mu.Lock()
	w.podCgroupLimits = &want
	w.mu.Unlock()
}

// checkMemoryDecreases refuses, with upstream's message, a memory limit
// lowered to or below what the container uses now (the kernel would have
// to reclaim or kill to get there). Usage is the working set: what the
// kernel cannot simply drop.
func (w *worker) checkMemoryDecreases(ctx context.Context, before *v1.Pod, actions []lifecycle.Action, ids map[string]string) error {
	var errs []string
	for _, a := range actions {
		want := a.Resources.Limits[v1.ResourceMemory]
		c, ok := containerspec.Find(before, a.Container)
		if !ok || want.IsZero() || ids[a.Container] == "" {
			continue
		}
		have := c.Resources.Limits[v1.ResourceMemory]
		if !have.IsZero() && want.Cmp(have) >= 0 {
			continue // not lowered
		}
		u, err := w.m.cfg.Runtime.Stats.Usage(ctx, ids[a.Container])
		if err != nil {
			errs = append(errs, fmt.Sprintf("missing container %q memory usage", a.Container))
			continue
		}
		if u.MemoryWorkingSet >= want.Value() {
			errs = append(errs, fmt.Sprintf("attempting to set container %q memory limit (%d) below current usage (%d)",
				a.Container, want.Value(), u.MemoryWorkingSet))
		}
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("cannot decrease memory limits: %s", errs[0])
	}
	return fmt.Errorf("cannot decrease memory limits: [%s]", strings.Join(errs, ", "))
}

// actuatedPod is pod with each container's resources as its instance runs
// with them.
func actuatedPod(pod *v1.Pod, r lifecycle.Resize) *v1.Pod {
	out := lifecycle.AllocatedPod(pod, r.Allocated)
	if out == pod {
		out = pod.DeepCopy()
	}
	for _, list := range [][]v1.Container{out.Spec.InitContainers, out.Spec.Containers} {
		for i := range list {
			if a, ok := r.Actuated[list[i].Name]; ok {
				list[i].Resources = *a.DeepCopy()
			}
		}
	}
	return out
}

// admitResize is the node's resource fit of pod as resized, against the
// allocations of the other admitted pods: the reason and message of a
// refusal, or "".
func (m *Manager) admitResize(pod *v1.Pod) (string, string) {
	var alloc v1.ResourceList
	if m.cfg.Node != nil {
		n, err := m.cfg.Node()
		if err != nil || n == nil {
			return admission.ReasonInvalidNodeInfo, admission.MessageInvalidNode
		}
		alloc = n.Status.Allocatable
	} else if m.cfg.Allocatable != nil {
		alloc = m.cfg.Allocatable()
	}
	// The pod itself is counted already: no pods limit.
	if a := admission.Resources(pod, alloc, m.activePods(pod.UID), 0); a != nil {
		return a.Reason, a.Message
	}
	return "", ""
}

// retryDeferredResizes wakes every pod (but except) whose resize waits for
// room: a pod that left or shrank may have made it.
func (m *Manager) retryDeferredResizes(except types.UID) {
	m.mu.Lock()
	workers := make([]*worker, 0, len(m.workers))
	for uid, w := range m.workers {
		if uid != except {
			workers = append(workers, w)
		}
	}
	m.mu.Unlock()
	for _, w := range workers {
		w.mu.Lock()
		deferred := w.resizePending != nil && w.resizePending.Reason == lifecycle.ReasonResizeDeferred
		w.mu.Unlock()
		if deferred {
			w.poke()
		}
	}
}

// writeJSONFile replaces path with v, never leaving a torn file.
func writeJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return durable.WriteFile(path, b)
}
