package podworker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/hook"
	"github.com/podvisor/podvisor/internal/agent/images"
	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/podref"
	"github.com/podvisor/podvisor/internal/agent/timeline"
	"github.com/podvisor/podvisor/internal/runtime"
)

// configError is a container that cannot be created as specified; it shows as
// waiting CreateContainerConfigError and is retried.
type configError = containerspec.ConfigError

// allContainers are the pod's init, regular and ephemeral containers.
func allContainers(pod *v1.Pod) []v1.Container {
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, e := range pod.Spec.EphemeralContainers {
		all = append(all, v1.Container(e.EphemeralContainerCommon))
	}
	return all
}

// ephemeralTarget is the container whose PID namespace ephemeral container
// name joins (targetContainerName); "" for any other container.
func ephemeralTarget(pod *v1.Pod, name string) string {
	for _, e := range pod.Spec.EphemeralContainers {
		if e.Name == name {
			return e.TargetContainerName
		}
	}
	return ""
}

func (w *worker) startContainer(ctx context.Context, pod *v1.Pod, a lifecycle.Action) {
	c, ok := containerspec.Find(pod, a.Container)
	if !ok {
		return
	}
	w.mu.Lock()
	w.containerLocked(a.Container).starting = true
	w.mu.Unlock()
	go func() {
		defer w.poke()
		defer w.clearStarting(a.Container)
		rt := w.m.cfg.Runtime
		spec, err := w.buildSpec(ctx, pod, c, a.Attempt)
		var imageFailure *images.Failure
		if errors.As(err, &imageFailure) {
			w.setWaiting(a.Container, imageFailure.Reason, imageFailure.Message)
			w.m.cfg.Recorder.Event(podref.Container(pod, c.Name), v1.EventTypeWarning, images.EventFailed, images.FailedEventMessage(imageFailure.Reason))
			return
		}
		if err != nil {
			reason, failedEvent := waitingReason(err)
			msg := err.Error()
			if reason == "ContainerCreating" {
				msg = "" // a volume not ready yet: upstream shows only a FailedMount event
			}
			w.setWaiting(a.Container, reason, msg)
			if failedEvent {
				w.m.cfg.Recorder.Eventf(podref.Container(pod, c.Name), v1.EventTypeWarning, "Failed", "Error: %v", err)
			}
			return
		}
		id, err := rt.Containers.Create(ctx, spec)
		if err != nil {
			w.setWaiting(a.Container, "CreateContainerError", err.Error())
			w.m.cfg.Recorder.Eventf(podref.Container(pod, c.Name), v1.EventTypeWarning, "Failed", "Error: %v", err)
			return
		}
		w.mu.Lock()
		cf := w.containerLocked(a.Container)
		cf.waiting, cf.waitingSince = nil, time.Time{}
		if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
			w.instanceLocked(a.Container, id).postStart = true
		}
		// No record of what the new instance runs with: it is made as
		// allocated (pod is the allocated pod), which is what the core
		// assumes of an instance without one, and handleResize records it
		// before the allocation changes. (A synced file write here would
		// cost every container start.)
		w.mu.Unlock()
		if st, err := rt.Containers.Status(ctx, id); err == nil {
			w.observe(st)
		}
		w.m.cfg.Recorder.Eventf(podref.Container(pod, c.Name), v1.EventTypeNormal, "Created", "Created container: %s", c.Name)
		w.runInstance(ctx, pod, c, id)
	}()
}

// runInstance starts a created instance and runs its postStart hook; the
// caller holds starting[c.Name] and clears it when this returns.
func (w *worker) runInstance(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) {
	rt := w.m.cfg.Runtime
	if err := rt.Containers.Start(ctx, id); err != nil {
		w.m.cfg.Recorder.Eventf(podref.Container(pod, c.Name), v1.EventTypeWarning, "Failed", "Error: %v", err)
	}
	st, err := rt.Containers.Status(ctx, id)
	if err != nil {
		return
	}
	w.observe(st)
	if st.Reason == "StartError" {
		w.m.cfg.Recorder.Eventf(podref.Container(pod, c.Name), v1.EventTypeWarning, "Failed", "Error: %s", st.Message)
		return
	}
	if st.State != runtime.StateRunning && st.State != runtime.StateExited {
		return // started by an earlier agent that died first: its event will come
	}
	w.m.cfg.Recorder.Eventf(podref.Container(pod, c.Name), v1.EventTypeNormal, "Started", "Started container %s", c.Name)
	w.runPostStart(ctx, pod, c, id)
}

// unstartedInstance is an instance an earlier agent created but died
// before starting.
type unstartedInstance struct{ id, name string }

// takeUnstartedLocked claims, for a start, the instances an earlier agent
// created but never started that are still their container's newest: they
// keep their ID and attempt, so no restart is counted and no second
// instance is made. Call with w.mu held; startUnstarted starts them.
func (w *worker) takeUnstartedLocked(pod *v1.Pod) []unstartedInstance {
	var due []unstartedInstance
	for id, f := range w.instFacts {
		if !f.unstarted {
			continue
		}
		f.unstarted = false
		name := f.container
		list := w.instancesOf(name)
		if n := len(list); n == 0 || list[n-1].ID != id || list[n-1].State != runtime.StateCreated || w.containerFactsOf(name).starting {
			continue
		}
		c, ok := containerspec.Find(pod, name)
		if !ok {
			continue
		}
		w.containerLocked(name).starting = true
		if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
			f.postStart = true
		}
		due = append(due, unstartedInstance{id, name})
	}
	return due
}

func (w *worker) startUnstarted(ctx context.Context, pod *v1.Pod, due []unstartedInstance) {
	for _, in := range due {
		c, _ := containerspec.Find(pod, in.name)
		w.m.cfg.Log.Info("starting a container an earlier agent created", "pod", pod.Namespace+"/"+pod.Name, "container", in.name, "id", in.id)
		go func() {
			defer w.poke()
			defer w.clearStarting(in.name)
			w.runInstance(ctx, pod, c, in.id)
		}()
	}
}

func (w *worker) clearStarting(name string) {
	w.mu.Lock()
	w.containerLocked(name).starting = false
	w.mu.Unlock()
}

// runPostStart runs the postStart hook. Until it returns the container is not
// Running and the next container is not started (starting stays set). When it
// fails the container is killed and the restart policy decides (§7).
func (w *worker) runPostStart(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) {
	defer w.editInstance(id, func(f *instanceFacts) { f.postStart = false })
	if c.Lifecycle == nil || c.Lifecycle.PostStart == nil || w.m.cfg.Hooks == nil {
		return
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.instanceLocked(c.Name, id).postStartCancel = cancel
	exited := w.termination != nil || !w.isRunningLocked(c.Name, id)
	w.mu.Unlock()
	defer w.editInstance(id, func(f *instanceFacts) { f.postStartCancel = nil })
	if exited {
		cancel() // already gone or terminating: the hook has nothing to wait for
	}
	w.record(pod, timeline.Entry{Kind: timeline.KindHook, Container: c.Name, State: "PostStart started"})
	begin := w.m.cfg.Clock.Now()
	msg, err := w.m.cfg.Hooks.Run(hctx, hook.PostStart, pod, c, id, w.podIP(), c.Lifecycle.PostStart, 0)
	w.recordHookEnd(pod, c.Name, "PostStart", begin, msg, err)
	if err == nil {
		return
	}
	if hctx.Err() != nil && ctx.Err() == nil {
		// Cut short because the container exited or the pod is terminating:
		// the core stops or restarts it, with the termination's grace.
		w.m.cfg.Log.Info("postStart hook cut short", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name)
		return
	}
	w.m.cfg.Log.Info("postStart hook failed", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "msg", msg)
	ev := hook.FailedEvent(hook.PostStart)
	w.m.cfg.Recorder.Event(podref.Container(pod, c.Name), ev.Type, ev.Reason, ev.Message)
	w.stopInstance(ctx, pod, c, id, lifecycle.PodGrace(pod), hook.PostStartKillMessage)
}

func (w *worker) setWaiting(name, reason, msg string) {
	w.mu.Lock()
	cf := w.containerLocked(name)
	cf.waiting = &v1.ContainerStateWaiting{Reason: reason, Message: msg}
	cf.waitingSince = w.m.cfg.Clock.Now()
	w.mu.Unlock()
}

func (w *worker) killContainer(ctx context.Context, pod *v1.Pod, a lifecycle.Action) {
	w.mu.Lock()
	list := w.instancesOf(a.Container)
	cf := w.containerLocked(a.Container)
	if len(list) == 0 || cf.stopping {
		w.mu.Unlock()
		return
	}
	id := list[len(list)-1].ID
	cf.stopping = true
	if a.Resize {
		w.instanceLocked(a.Container, id).resizeKilled = true
	}
	w.mu.Unlock()
	c, _ := containerspec.Find(pod, a.Container)
	go func() {
		defer w.poke()
		defer func() {
			w.mu.Lock()
			w.containerLocked(a.Container).stopping = false
			w.mu.Unlock()
		}()
		w.stopInstance(ctx, pod, c, id, a.Grace, a.Message)
	}()
}

// stopInstance is the one stop path every reason to stop a container uses
// (deletion, liveness/startup failure, deadline, postStart failure, shutdown):
// for a pod that asked for it, a wait until the service proxy no longer
// routes to it; preStop with the grace period as its budget, then the stop
// signal, then SIGKILL when what is left of the grace period (never less
// than 2 s) ends.
func (w *worker) stopInstance(ctx context.Context, pod *v1.Pod, c *v1.Container, id string, grace time.Duration, msg string) {
	name := ""
	if c != nil {
		name = c.Name
	}
	if msg == "" {
		msg = "Stopping container " + name
	}
	w.m.cfg.Recorder.Event(podref.Container(pod, name), v1.EventTypeNormal, "Killing", msg)
	// Stopping must finish even while the agent itself stops.
	sctx := context.WithoutCancel(ctx)
	start := w.m.cfg.Clock.Now()
	waited := time.Duration(0)
	if w.isRunning(name, id) {
		waited = w.waitUnrouted(sctx, pod, name, grace)
	}
	if c != nil && c.Lifecycle != nil && c.Lifecycle.PreStop != nil && w.m.cfg.Hooks != nil && w.isRunning(name, id) {
		budget := lifecycle.PreStopBudget(grace - waited)
		hctx, cancel := context.WithCancel(sctx)
		w.mu.Lock()
		w.instanceLocked(name, id).preStopCancel = cancel
		w.mu.Unlock()
		w.record(pod, timeline.Entry{Kind: timeline.KindHook, Container: name, State: "PreStop started",
			Message: fmt.Sprintf("budget %v", budget)})
		hmsg, err := w.m.cfg.Hooks.Run(hctx, hook.PreStop, pod, c, id, w.podIP(), c.Lifecycle.PreStop, budget)
		w.recordHookEnd(pod, name, "PreStop", start, hmsg, err)
		w.editInstance(id, func(f *instanceFacts) { f.preStopCancel = nil })
		cancel()
		switch {
		case errors.Is(err, hook.ErrBudgetExceeded):
			w.m.cfg.Log.Info("preStop hook did not finish within the grace period", "pod", pod.Namespace+"/"+pod.Name, "container", name)
		case err != nil:
			w.m.cfg.Log.Info("preStop hook failed", "pod", pod.Namespace+"/"+pod.Name, "container", name, "msg", hmsg)
			ev := hook.FailedEvent(hook.PreStop)
			w.m.cfg.Recorder.Event(podref.Container(pod, c.Name), ev.Type, ev.Reason, ev.Message)
		}
	}
	remaining := lifecycle.KillAfter(grace, w.m.cfg.Clock.Since(start))
	signaled := w.m.cfg.Clock.Now()
	if w.isRunning(name, id) {
		w.record(pod, timeline.Entry{Kind: timeline.KindSignal, Container: name, State: stopSignalName(c),
			Message: fmt.Sprintf("grace %v; SIGKILL at +%v if still running", remaining.Round(time.Millisecond), remaining.Round(time.Millisecond))})
	}
	if err := w.m.cfg.Runtime.Containers.Stop(sctx, id, remaining); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		w.m.cfg.Log.Warn("stopping container", "pod", pod.Namespace+"/"+pod.Name, "container", name, "err", err)
	}
	if st, err := w.m.cfg.Runtime.Containers.Status(sctx, id); err == nil {
		if st.State == runtime.StateExited && st.ExitCode == 137 && !st.FinishedAt.Before(signaled.Add(remaining-50*time.Millisecond)) {
			// Still running when the grace period ended: killed.
			w.record(pod, timeline.Entry{Time: st.FinishedAt, Kind: timeline.KindSignal, Container: name, State: "SIGKILL",
				Message: fmt.Sprintf("the grace period ended (+%v after the stop signal)", st.FinishedAt.Sub(signaled).Round(time.Millisecond))})
		}
		w.observe(st)
	}
}

// stopSignalName is the stop signal the spec asks for; without one, the
// image's STOPSIGNAL or SIGTERM.
func stopSignalName(c *v1.Container) string {
	if c != nil && c.Lifecycle != nil && c.Lifecycle.StopSignal != nil {
		return string(*c.Lifecycle.StopSignal)
	}
	return "SIGTERM"
}

// record adds entries to the pod's timeline, if there is one.
func (w *worker) record(pod *v1.Pod, entries ...timeline.Entry) {
	if w.m.cfg.Timeline != nil {
		w.m.cfg.Timeline.Record(timeline.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, entries...)
	}
}

// recordHookEnd records how a hook that began at begin ended.
func (w *worker) recordHookEnd(pod *v1.Pod, container, which string, begin time.Time, msg string, err error) {
	e := timeline.Entry{Kind: timeline.KindHook, Container: container, State: which + " succeeded"}
	switch {
	case errors.Is(err, hook.ErrBudgetExceeded):
		e.State = which + " cut at its budget"
	case err != nil:
		e.State, e.Message = which+" failed", msg
	}
	took := fmt.Sprintf("took %v", w.m.cfg.Clock.Since(begin).Round(time.Millisecond))
	if e.Message == "" {
		e.Message = took
	} else {
		e.Message = took + ": " + e.Message
	}
	w.record(pod, e)
}

// isRunning: no preStop for a container that already exited (§7).
func (w *worker) isRunning(name, id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.isRunningLocked(name, id)
}

func (w *worker) isRunningLocked(name, id string) bool {
	for _, s := range w.instancesOf(name) {
		if s.ID == id {
			return s.State == runtime.StateRunning
		}
	}
	return false
}

// stopSignal is lifecycle.stopSignal; 0 leaves it to the runtime (the
// image's STOPSIGNAL, else SIGTERM).
func stopSignal(c *v1.Container) syscall.Signal {
	if c != nil && c.Lifecycle != nil && c.Lifecycle.StopSignal != nil {
		if s, ok := signalByName[string(*c.Lifecycle.StopSignal)]; ok {
			return s
		}
	}
	return 0
}

var signalByName = map[string]syscall.Signal{
	"SIGABRT": syscall.SIGABRT, "SIGALRM": syscall.SIGALRM, "SIGBUS": syscall.SIGBUS, "SIGCHLD": syscall.SIGCHLD,
	"SIGCONT": syscall.SIGCONT, "SIGFPE": syscall.SIGFPE, "SIGHUP": syscall.SIGHUP, "SIGILL": syscall.SIGILL,
	"SIGINT": syscall.SIGINT, "SIGIO": syscall.SIGIO, "SIGKILL": syscall.SIGKILL, "SIGPIPE": syscall.SIGPIPE,
	"SIGPROF": syscall.SIGPROF, "SIGPWR": syscall.SIGPWR, "SIGQUIT": syscall.SIGQUIT, "SIGSEGV": syscall.SIGSEGV,
	"SIGSTKFLT": syscall.SIGSTKFLT, "SIGSTOP": syscall.SIGSTOP, "SIGSYS": syscall.SIGSYS, "SIGTERM": syscall.SIGTERM,
	"SIGTRAP": syscall.SIGTRAP, "SIGTSTP": syscall.SIGTSTP, "SIGTTIN": syscall.SIGTTIN, "SIGTTOU": syscall.SIGTTOU,
	"SIGURG": syscall.SIGURG, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2, "SIGVTALRM": syscall.SIGVTALRM,
	"SIGWINCH": syscall.SIGWINCH, "SIGXCPU": syscall.SIGXCPU, "SIGXFSZ": syscall.SIGXFSZ,
}

// logPath is <pods>/<ns>_<pod>_<uid>/<container>/<attempt>.log, as upstream's /var/log/pods.
func (w *worker) logPath(container string, attempt int32) string {
	return filepath.Join(w.podDir(), container, strconv.Itoa(int(attempt))+".log")
}

// LogPath finds the log of a container's current (or previous) instance.
func (m *Manager) LogPath(namespace, pod, container string, previous bool) (string, func() bool, error) {
	m.mu.Lock()
	var w *worker
	candidates := make([]*worker, 0, len(m.workers))
	for _, cand := range m.workers {
		candidates = append(candidates, cand)
	}
	m.mu.Unlock()
	var newest time.Time
	for _, cand := range candidates {
		cand.mu.Lock()
		// A pod recreated under the same name: the newest object is the one
		// kubectl means, not the old one still terminating.
		if cand.pod.Namespace == namespace && cand.pod.Name == pod && (w == nil || cand.pod.CreationTimestamp.After(newest)) {
			w, newest = cand, cand.pod.CreationTimestamp.Time
		}
		cand.mu.Unlock()
	}
	if w == nil {
		return "", nil, runtime.NotFoundf("pod %q in namespace %q is not available", pod, namespace)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	list := w.instancesOf(container)
	idx := len(list) - 1
	if previous {
		idx = w.previousLocked(container, list)
	}
	if idx < 0 {
		if previous {
			return "", nil, runtime.NotFoundf("previous terminated container %q in pod %q not found", container, pod)
		}
		return "", nil, runtime.NotFoundf("container %q in pod %q is not available", container, pod)
	}
	id, path := list[idx].ID, list[idx].LogPath
	exited := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, s := range w.instancesOf(container) {
			if s.ID == id {
				return s.State == runtime.StateExited
			}
		}
		return true
	}
	return path, exited, nil
}

// previousLocked is the index in list of the instance `logs --previous`
// reads: the one the published status shows as lastState, as upstream
// (during a back-off that is the newest instance, which the container GC
// keeps), else the one before the newest.
func (w *worker) previousLocked(container string, list []runtime.Status) int {
	st := w.lastStatus
	for _, statuses := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for _, cs := range statuses {
			if cs.Name != container || cs.LastTerminationState.Terminated == nil {
				continue
			}
			for i := len(list) - 1; i >= 0; i-- {
				if w.m.runtimeName+"://"+list[i].ID == cs.LastTerminationState.Terminated.ContainerID {
					return i
				}
			}
		}
	}
	return len(list) - 2
}

// shortenStopsLocked applies a shorter grace period to stops in flight: their
// preStop hooks are cut when it ends, and the processes get the stop signal
// again with SIGKILL at the new deadline (the shorter of the two wins).
func (w *worker) shortenStopsLocked(pod *v1.Pod, grace time.Duration) {
	for name, cf := range w.containers {
		list := w.instancesOf(name)
		if !cf.stopping || len(list) == 0 {
			continue
		}
		id := list[len(list)-1].ID
		if cancel := w.factsOf(id).preStopCancel; cancel != nil {
			w.m.cfg.Clock.AfterFunc(grace, cancel)
		}
		go func() {
			_ = w.m.cfg.Runtime.Containers.Stop(context.Background(), id, lifecycle.KillAfter(grace, 0))
		}()
	}
}
