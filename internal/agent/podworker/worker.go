package podworker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/admission"
	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/podcgroup"
	"github.com/podvisor/podvisor/internal/agent/podref"
	"github.com/podvisor/podvisor/internal/agent/status"
	"github.com/podvisor/podvisor/internal/runtime"
)

// worker owns everything the agent knows of one pod UID. sync runs only on
// the worker's goroutine; actions run on their own goroutines and report back
// through the fields below (under mu) and a wake-up.
type worker struct {
	m   *Manager
	uid types.UID

	mu          sync.Mutex
	pod         *v1.Pod
	gone        bool                    // the object is gone from the API
	sandboxes   []runtime.SandboxStatus // oldest first (sandbox.go)
	sandboxBusy bool                    // a RunSandbox is under way
	// sandboxRetryAt: no RunSandbox before then (the last one failed).
	sandboxRetryAt time.Time
	// sandboxStopped: sandboxes this worker stopped (their network
	// released); one that died is not stopped until the worker stops it.
	sandboxStopped map[string]bool
	containers     map[string]*containerFacts // by container name (facts.go)
	instFacts      map[string]*instanceFacts  // by instance ID (facts.go)
	backoff        map[string]lifecycle.BackOffEntry
	termination    *lifecycle.Termination
	rejected       *admission.Refusal // set when admission refused the pod
	lastStatus     v1.PodStatus
	// reported is the last status of a sync handed to the status manager,
	// its terminal phase held back as lifecycle.HoldTerminalPhase says.
	reported v1.PodStatus
	// extraConditions are conditions the agent adds once (DisruptionTarget).
	extraConditions []v1.PodCondition
	stopped         chan struct{} // closed once a terminated pod has nothing running
	// In-place resize (resize.go): the allocation and what runs, read
	// from the pod's directory on first use; the pending resize and the
	// generation it was decided for; the last actuation's failure and when
	// to try again; resizes under way; instances stopped for a resize.
	resources        *resourceRecord
	resizePending    *lifecycle.ResizePending
	resizePendingGen int64
	resizeErr        string
	resizeNotBefore  time.Time
	resizing         bool
	podCgroupLimits  *podcgroup.Limits // last written by syncPodCgroup
	lastPhase        v1.PodPhase
	finished         bool
	// volumesUnmounted: the terminated pod's CSI volumes are torn down
	// (unmountVolumes).
	volumesUnmounted bool
	// processesLeftSince: since when processes have been seen left in the
	// pod's cgroup with its containers and sandboxes stopped; zero when none.
	processesLeftSince time.Time

	wake  chan struct{}
	timer clock.Timer
}

func newWorker(m *Manager, pod *v1.Pod, adopted []runtime.Status, sandboxes []runtime.SandboxStatus) *worker {
	w := &worker{
		m: m, uid: pod.UID, pod: pod,
		containers: map[string]*containerFacts{}, instFacts: map[string]*instanceFacts{},
		backoff: map[string]lifecycle.BackOffEntry{}, sandboxStopped: map[string]bool{},
		wake: make(chan struct{}, 1),
	}
	for _, s := range adopted {
		cf := w.containerLocked(s.Name)
		cf.instances = append(cf.instances, s)
		switch s.State {
		case runtime.StateRunning:
			w.instanceLocked(s.Name, s.ID).adopted = true
		case runtime.StateCreated:
			w.instanceLocked(s.Name, s.ID).unstarted = true
		}
	}
	for _, cf := range w.containers {
		sortInstances(cf.instances)
	}
	w.sandboxes = append(w.sandboxes, sandboxes...)
	sortSandboxes(w.sandboxes)
	w.poke()
	return w
}

func sortInstances(list []runtime.Status) {
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].Attempt != list[j].Attempt {
			return list[i].Attempt < list[j].Attempt
		}
		return list[i].CreatedAt.Before(list[j].CreatedAt)
	})
}

func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) update(pod *v1.Pod) {
	w.mu.Lock()
	old := w.pod
	w.pod = pod
	w.mu.Unlock()
	// A changed pod (labels, annotations, spec) has its volumes looked at
	// now, as the kubelet's pod sync: downward API files, expanded claims.
	if old != nil && old.Generation == pod.Generation && maps.Equal(old.Labels, pod.Labels) && maps.Equal(old.Annotations, pod.Annotations) {
		w.poke()
		return
	}
	w.m.vols.Refresh(w.uid)
	w.poke()
}

func (w *worker) markGone() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
	w.poke()
}

func (w *worker) currentPod() *v1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pod.DeepCopy()
	p.Status = w.lastStatus
	return p
}

// isActive: admitted and not terminal (counts against maxPods and allocatable).
func (w *worker) isActive() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rejected == nil && !w.gone && w.lastPhase != v1.PodSucceeded && w.lastPhase != v1.PodFailed
}

// observe records a new runtime status of one of the pod's instances.
func (w *worker) observe(st runtime.Status) {
	w.mu.Lock()
	f := w.factsOf(st.ID)
	if f.removed {
		w.mu.Unlock()
		return // a late event of an instance a restart of all containers removed
	}
	list := w.instancesOf(st.Name)
	if !updateInstance(list, st) {
		list = append(list, st)
		sortInstances(list)
	}
	w.containerLocked(st.Name).instances = list
	if f.postStartCancel != nil && st.State == runtime.StateExited {
		f.postStartCancel()
	}
	w.mu.Unlock()
	w.poke()
}

func (w *worker) podDirName() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return podDirName(w.pod)
}

func podDirName(pod *v1.Pod) string { return podDirNameOf(pod.Namespace, pod.Name, pod.UID) }

// podDirNameOf is <ns>_<name>_<uid>, as upstream's /var/log/pods entries.
func podDirNameOf(ns, name string, uid types.UID) string {
	return fmt.Sprintf("%s_%s_%s", ns, name, uid)
}

func (w *worker) podDir() string { return filepath.Join(w.m.cfg.PodsDir, w.podDirName()) }

func (w *worker) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		w.syncSafely(ctx)
		if w.finished {
			return
		}
	}
}

// syncSafely turns a panic while handling this pod into an event and a retry:
// one bad pod must never take down the agent or the other pods.
func (w *worker) syncSafely(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			w.mu.Lock()
			pod := w.pod
			w.mu.Unlock()
			w.m.cfg.Log.Error("panic while syncing pod", "pod", pod.Namespace+"/"+pod.Name, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			w.m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedSync", "error syncing pod, will retry: internal error: %v", r)
			w.wakeAfter(10 * time.Second)
		}
	}()
	w.sync(ctx)
}

func (w *worker) wakeAfter(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
	w.timer = w.m.cfg.Clock.AfterFunc(d, w.poke)
}

func (w *worker) sync(ctx context.Context) {
	if syncHook != nil {
		syncHook(w)
	}
	now := w.m.cfg.Clock.Now()
	w.mu.Lock()
	pod := w.pod
	gone := w.gone
	if w.rejected == nil && !gone && w.lastPhase == "" && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed && !w.hasInstancesLocked() {
		w.mu.Unlock()
		if a := w.m.admit(pod); a != nil {
			st := lifecycle.Rejected(pod, a.Reason, a.Message, now)
			w.mu.Lock()
			w.rejected = a
			w.lastPhase = st.Phase
			w.lastStatus = st
			w.mu.Unlock()
			w.m.cfg.Recorder.Event(pod, v1.EventTypeWarning, a.Reason, a.Message)
			w.m.cfg.Status.Set(pod, st, false)
			return
		}
		w.mu.Lock()
	}
	if w.rejected != nil {
		a := *w.rejected
		w.mu.Unlock()
		if gone {
			w.finish(ctx)
			return
		}
		// Rendered again from the newest pod: a new generation is observed.
		st := lifecycle.Rejected(pod, a.Reason, a.Message, now)
		w.mu.Lock()
		w.lastStatus = st
		w.mu.Unlock()
		w.m.cfg.Status.Set(pod, st, pod.DeletionTimestamp != nil)
		return
	}
	if w.termination == nil && (gone || pod.DeletionTimestamp != nil) {
		grace := lifecycle.DeletionGrace(pod)
		if gone {
			grace = 0 // force-deleted: the minimum grace (the stop path floors it at 2 s)
		}
		w.termination, _ = lifecycle.NextTermination(nil, lifecycle.StopRequest{Grace: grace}, now)
	} else if w.termination != nil && pod.DeletionGracePeriodSeconds != nil {
		var shortened bool
		w.termination, shortened = lifecycle.NextTermination(w.termination, lifecycle.StopRequest{Grace: lifecycle.DeletionGrace(pod)}, now)
		if shortened {
			w.shortenStopsLocked(pod, w.termination.Grace)
		}
	}
	w.mu.Unlock()
	w.handleResize(pod)
	w.mu.Lock()
	var unstarted []unstartedInstance
	if w.termination == nil {
		unstarted = w.takeUnstartedLocked(pod)
	}
	if w.termination != nil {
		for _, f := range w.instFacts {
			if f.postStartCancel != nil {
				f.postStartCancel()
			}
		}
	}
	probeChanges := w.probeChangesLocked(pod)
	snap := w.snapshotLocked(now)
	// New instances and the pod's cgroup are made as allocated.
	apod := lifecycle.AllocatedPod(pod, snap.Resize.Allocated)
	w.mu.Unlock()
	w.startUnstarted(ctx, pod, unstarted)
	w.applyProbeChanges(pod, probeChanges, w.termination != nil)

	plan := lifecycle.Compute(snap)

	w.mu.Lock()
	w.backoff = plan.BackOff
	w.lastStatus = plan.Status
	w.lastPhase = plan.Status.Phase
	w.mu.Unlock()

	w.syncPodCgroup(apod, snap.Resize)
	var resizes []lifecycle.Action
	for _, a := range plan.Actions {
		switch a.Kind {
		case lifecycle.ActionStart:
			w.startContainer(ctx, apod, a)
		case lifecycle.ActionKill:
			w.killContainer(ctx, pod, a)
		case lifecycle.ActionReset:
			w.resetContainer(ctx, pod, a)
		case lifecycle.ActionRunSandbox:
			w.runSandbox(ctx, apod)
		case lifecycle.ActionResize:
			resizes = append(resizes, a)
		}
	}
	if len(resizes) > 0 {
		w.resizeContainers(ctx, apod, resizes)
	}
	for _, e := range plan.Events {
		w.m.cfg.Recorder.Event(podref.Container(pod, e.Container), e.Type, e.Reason, e.Message)
	}
	if !gone {
		w.report(pod, plan.Status, w.stopState(plan))
	}
	if plan.Done {
		w.stopSandboxes(ctx, pod, "")
		// A stopped pod is one whose CSI volumes are unpublished too: the
		// node's shutdown (and eviction) wait for that, as upstream's
		// shutdown manager waits for the unmounts of a band's pods; a
		// failed unmount is retried and closes it when it succeeds.
		if w.unmountVolumes(ctx, pod) {
			w.markStopped()
		}
		// The final delete waits for the pod's termination to be complete
		// (lifecycle/reclaim.go): a sandbox whose stop failed is stopped
		// again sandboxRetry later, and the delete follows then.
		r := w.reclaim(pod, plan)
		if !gone && lifecycle.MayDelete(pod, r) {
			w.m.cfg.Status.Set(pod, plan.Status, true)
		} else if !gone {
			// The terminal phase held above, now that the sandboxes are
			// stopped (held still if a stop failed: retried).
			w.report(pod, plan.Status, r)
			w.leftProcesses(pod, r, now)
		}
	} else {
		w.stopOldSandboxes(ctx, pod)
	}
	if plan.Done && gone {
		w.finish(ctx)
		return
	}
	if !plan.WakeAt.IsZero() {
		w.wakeAfter(plan.WakeAt.Sub(now))
	}
}

// reclaim is what the worker recorded of the pod's resources, for the
// final delete: filled again by a new agent, whose stopSandboxes stops (again)
// every sandbox it adopted.
func (w *worker) reclaim(pod *v1.Pod, plan lifecycle.Plan) lifecycle.Reclaim {
	r := w.stopState(plan)
	stopped := r
	stopped.VolumesMounted = false // left processes are found (and killed) whatever the volumes
	if stopped.Reclaimed() && w.m.cfg.Cgroups != nil {
		// Only once the rest is done: the count is read from the cgroup.
		n, err := w.m.cfg.Cgroups.Processes(podcgroup.Parent(string(pod.UID), lifecycle.QOSClass(pod)))
		r.ProcessesLeft = err == nil && n > 0
	}
	return r
}

// report hands status to the status manager, a terminal phase held back
// while r says the pod's containers or sandboxes may still run: the phase
// stays the one reported before (the API's, before the first report).
func (w *worker) report(pod *v1.Pod, status v1.PodStatus, r lifecycle.Reclaim) {
	w.mu.Lock()
	prev := w.reported
	if prev.Phase == "" {
		prev = pod.Status
	}
	status = lifecycle.HoldTerminalPhase(prev, status, r)
	w.reported = status
	w.mu.Unlock()
	w.m.cfg.Status.Set(pod, status, false)
}

// stopState is what the worker knows of the pod's containers, sandboxes
// and volumes, without reading its cgroup (see reclaim).
func (w *worker) stopState(plan lifecycle.Plan) lifecycle.Reclaim {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := lifecycle.Reclaim{Done: plan.Done, SandboxCreating: w.sandboxBusy, VolumesMounted: !w.volumesUnmounted}
	for _, sb := range w.sandboxes {
		r.Sandboxes = append(r.Sandboxes, lifecycle.SandboxRecord{ID: sb.ID, Stopped: w.sandboxStopped[sb.ID]})
	}
	return r
}

// unmountVolumes tears down the terminated pod's CSI volumes, which its
// final delete waits for (lifecycle.Reclaim); a failure (a driver gone or
// failing) is tried again sandboxRetry later, as the kubelet's reconciler
// retries, and logged as it does.
func (w *worker) unmountVolumes(ctx context.Context, pod *v1.Pod) (unmounted bool) {
	w.mu.Lock()
	done := w.volumesUnmounted
	w.mu.Unlock()
	if done {
		return true
	}
	err := w.m.vols.Unmount(ctx, w.podDir())
	w.mu.Lock()
	w.volumesUnmounted = err == nil
	w.mu.Unlock()
	if err != nil {
		w.m.cfg.Log.Warn("unmounting volumes of a terminated pod", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "err", err)
		w.m.cfg.Clock.AfterFunc(sandboxRetry, w.poke)
	}
	return err == nil
}

// processesLeftPoll is how often a terminated pod's cgroup is read again
// while processes are left in it.
const processesLeftPoll = 100 * time.Millisecond

// leftProcesses notes the processes left in the cgroup of a pod whose
// containers and sandboxes are stopped, kills them when lifecycle says
// (a process that escaped its container, which would hold the pod's
// deletion for good), and reads the cgroup again soon: no event says when
// they are gone.
func (w *worker) leftProcesses(pod *v1.Pod, r lifecycle.Reclaim, now time.Time) {
	w.mu.Lock()
	if !r.ProcessesLeft {
		w.processesLeftSince = time.Time{}
		w.mu.Unlock()
		return
	}
	if w.processesLeftSince.IsZero() {
		w.processesLeftSince = now
	}
	since := w.processesLeftSince
	w.mu.Unlock()
	if lifecycle.KillLeftProcesses(r, since, now) {
		pids, err := w.m.cfg.Cgroups.KillProcesses(podcgroup.Parent(string(pod.UID), lifecycle.QOSClass(pod)))
		// Killed processes take a moment to leave the cgroup: the polls
		// until then find nothing to kill and say nothing.
		if len(pids) > 0 || err != nil {
			w.m.cfg.Log.Warn("killed processes left in the pod's cgroup after its containers and sandboxes stopped",
				"pod", pod.Namespace+"/"+pod.Name, "pids", pids, "leftFor", now.Sub(since), "err", err)
		}
	}
	w.wakeAfter(processesLeftPoll)
}

// finish removes everything of the pod from the node and ends the worker.
func (w *worker) finish(ctx context.Context) {
	w.mu.Lock()
	var ids []string
	for _, cf := range w.containers {
		for _, s := range cf.instances {
			ids = append(ids, s.ID)
		}
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.finished = true
	pod := w.pod
	w.mu.Unlock()
	w.removeInstances(ctx, pod, ids)
	w.removeSandboxes(ctx, pod)
	w.m.removePodDir(w.podDir())
	w.m.removeWorker(w.uid)
	w.markStopped() // nothing of the worker is left to wait for
}

// removeInstances forgets the instances in the prober and removes them from
// the runtime (their logs stay with the pod directory).
func (w *worker) removeInstances(ctx context.Context, pod *v1.Pod, ids []string) {
	for _, id := range ids {
		if w.m.cfg.Prober != nil {
			w.m.cfg.Prober.RemoveContainer(id)
		}
		if err := w.m.cfg.Runtime.Containers.Remove(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			w.m.cfg.Log.Warn("removing container", "pod", pod.Namespace+"/"+pod.Name, "id", id, "err", err)
		}
	}
}

// syncHook lets tests inject a panic into sync.
var syncHook func(*worker)

func (w *worker) snapshotLocked(now time.Time) lifecycle.Snapshot {
	containers := map[string]lifecycle.ContainerRecord{}
	for _, c := range allContainers(w.pod) {
		cf := w.containerFactsOf(c.Name)
		rec := lifecycle.ContainerRecord{
			Waiting:      cf.waiting,
			WaitingSince: cf.waitingSince,
			Starting:     cf.starting,
			Stopping:     cf.stopping,
		}
		list := w.instancesOf(c.Name)
		if n := len(list); n > 0 {
			rec.Current = w.instance(list[n-1])
			rec.ResizeRestart = w.factsOf(list[n-1].ID).resizeKilled
			if n > 1 {
				rec.Previous = w.instance(list[n-2])
			}
		}
		containers[c.Name] = rec
	}
	// The prober's verdicts count for a container's newest instance only.
	probes := map[string]lifecycle.ProbeState{}
	for name, cf := range w.containers {
		if list, n := cf.instances, len(cf.instances); n > 0 {
			if p := w.factsOf(list[n-1].ID).probe; p != nil {
				probes[name] = *p
			}
		}
	}
	backoff := make(map[string]lifecycle.BackOffEntry, len(w.backoff))
	for k, v := range w.backoff {
		backoff[k] = v
	}
	pod := w.pod
	if w.lastPhase != "" {
		// The API may lag behind what this worker already published: start from
		// the last status, with the conditions other writers own as the API has them.
		pod = pod.DeepCopy()
		pod.Status = status.Merge(pod.Status, w.lastStatus)
	}
	if len(w.extraConditions) > 0 {
		pod = pod.DeepCopy()
		for _, c := range w.extraConditions {
			if !hasCondition(pod.Status.Conditions, c.Type) {
				pod.Status.Conditions = append(pod.Status.Conditions, c)
			}
		}
	}
	var term *lifecycle.Termination
	if w.termination != nil {
		t := *w.termination
		term = &t
	}
	return lifecycle.Snapshot{
		Pod: pod, Now: now, Config: w.m.cfg.Lifecycle, SandboxReady: w.sandboxReadyLocked(),
		HostIP: w.m.cfg.HostIP, PodIP: w.podIPLocked(),
		Containers: containers, Probes: probes, BackOff: backoff, Termination: term,
		Resize: w.resizeSnapshotLocked(),
	}
}

func (w *worker) instance(s runtime.Status) *lifecycle.Instance {
	in := &lifecycle.Instance{
		ID: w.m.runtimeName + "://" + s.ID, Attempt: s.Attempt,
		CreatedAt: s.CreatedAt, StartedAt: s.StartedAt, FinishedAt: s.FinishedAt,
		ExitCode: s.ExitCode, Signal: s.Signal, Reason: s.Reason, Message: s.Message,
		Image: s.Image, ImageID: s.ImageRef,
		PostStartDone: !w.factsOf(s.ID).postStart,
		OldSandbox:    w.oldSandboxLocked(s.SandboxID),
	}
	switch s.State {
	case runtime.StateCreated:
		in.State = lifecycle.StateCreated
	case runtime.StateRunning:
		in.State = lifecycle.StateRunning
	case runtime.StateExited:
		in.State = lifecycle.StateExited
		if in.Message == "" {
			in.Message = w.terminationMessage(s)
		}
	}
	return in
}

func hasCondition(conds []v1.PodCondition, t v1.PodConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return true
		}
	}
	return false
}
