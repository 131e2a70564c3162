package cri

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// seed learns the containers that exist before this runtime watches: the
// agent reads them with List; their later changes are events.
func (r *Runtime) seed(ctx context.Context) error {
	list, err := r.rs.ListContainers(quiet(ctx), nil)
	if err != nil {
		return classify(err, "cri runtime %s: list containers", r.cfg.Endpoint)
	}
	for _, c := range list {
		uid := c.GetLabels()[labelPodUID]
		if uid == "" {
			continue
		}
		name := c.GetMetadata().GetName()
		r.remember(c.Id, metaOf(c.GetLabels(), c.GetAnnotations(), name))
		r.events.seed(c.Id, uid, name, containerState(c.GetState()))
	}
	if err := r.eachPodSandbox(ctx, r.events.seedSandbox); err != nil {
		return classify(err, "cri runtime %s: list sandboxes", r.cfg.Endpoint)
	}
	return nil
}

// eachPodSandbox calls fn with every pod's sandbox: its ID, pod UID and
// readiness.
func (r *Runtime) eachPodSandbox(ctx context.Context, fn func(id, podUID string, ready bool)) error {
	sandboxes, err := r.rs.ListPodSandbox(quiet(ctx), nil)
	if err != nil {
		return err
	}
	for _, sb := range sandboxes {
		if uid := sb.GetLabels()[labelPodUID]; uid != "" {
			fn(sb.Id, uid, sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY)
		}
	}
	return nil
}

// relistLoop lists the containers every RelistPeriod, and at once when the
// event stream (re)connects or breaks: whatever it missed is then seen.
func (r *Runtime) relistLoop() {
	defer r.wg.Done()
	t := r.clock.NewTicker(r.cfg.RelistPeriod)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C():
		case <-r.relist:
		}
		err := r.relistOnce(r.ctx)
		switch {
		case err != nil && !failing && r.ctx.Err() == nil:
			r.log.Warn("cannot list containers", "err", err)
		case err == nil && failing:
			r.log.Info("listing containers again")
		}
		failing = err != nil
	}
}

func (r *Runtime) relistOnce(ctx context.Context) error {
	gen := r.events.beginRelist()
	list, err := r.rs.ListContainers(quiet(ctx), nil)
	if err != nil {
		return classify(err, "list containers")
	}
	listed := make(map[string]bool, len(list))
	for _, c := range list {
		listed[c.Id] = true
		if uid := c.GetLabels()[labelPodUID]; uid != "" {
			r.events.observe(c.Id, uid, c.GetMetadata().GetName(), containerState(c.GetState()))
		}
	}
	if err := r.eachPodSandbox(ctx, r.events.observeSandbox); err != nil {
		return classify(err, "list sandboxes")
	}
	r.events.endRelist(gen)
	// Containers removed behind this runtime's back: what it kept of them
	// goes. One created since the list began is read again when needed.
	r.mu.Lock()
	for id := range r.containers {
		if !listed[id] {
			delete(r.containers, id)
		}
	}
	r.mu.Unlock()
	r.pruneEarlyExits(listed)
	return nil
}

func (r *Runtime) relistNow() {
	select {
	case r.relist <- struct{}{}:
	default:
	}
}

// streamRetry is the pause before reconnecting a broken event stream.
const streamRetry = time.Second

// streamEvents follows the runtime's container events until Close. A
// runtime without them (containerd 1.6) answers Unimplemented: the relist
// alone then reports changes.
func (r *Runtime) streamEvents() {
	defer r.wg.Done()
	ch := make(chan *runtimeapi.ContainerEventResponse, 128)
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		for ev := range ch {
			r.handleEvent(ev)
		}
	}()
	defer func() {
		close(ch) // the client sends only from within GetContainerEvents
		<-handled
	}()
	for {
		err := r.rs.GetContainerEvents(quiet(r.ctx), ch, func(runtimeapi.RuntimeService_GetContainerEventsClient) {
			r.log.Debug("container event stream open")
			r.relistNow() // what happened while the stream was down
		})
		if r.ctx.Err() != nil {
			return
		}
		if isCode(err, codes.Unimplemented) {
			r.log.Info("the runtime has no container events: relisting", "period", r.cfg.RelistPeriod)
			return
		}
		r.log.Warn("container event stream broken, reconnecting", "err", err, "after", streamRetry)
		r.relistNow()
		select {
		case <-r.ctx.Done():
			return
		case <-r.clock.After(streamRetry):
		}
	}
}

// handleEvent records one CRI container event. A sandbox's own event
// (its id is the sandbox's) is the sandbox's: only its stop matters.
// Containers that are not a pod's are ignored.
func (r *Runtime) handleEvent(ev *runtimeapi.ContainerEventResponse) {
	id := ev.GetContainerId()
	if id == "" {
		return
	}
	if sb := ev.GetPodSandboxStatus(); id == sb.GetId() {
		if uid := sb.GetLabels()[labelPodUID]; uid != "" && ev.GetContainerEventType() == runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
			r.events.observeSandbox(id, uid, false)
		}
		return
	}
	var state runtime.State
	switch ev.GetContainerEventType() {
	case runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT:
		state = runtime.StateCreated
	case runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT:
		state = runtime.StateRunning
	case runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT:
		state = runtime.StateExited
	default: // deleted: Remove or the relist forgets it
		return
	}
	podUID, name, _, known := r.events.lookup(id)
	for _, s := range ev.GetContainersStatuses() {
		if s.GetId() == id {
			podUID, name, known = s.GetLabels()[labelPodUID], s.GetMetadata().GetName(), true
		}
	}
	if !known {
		m, err := r.meta(r.ctx, id)
		if err != nil {
			return // removed already; or the relist sees it
		}
		podUID, name = m.podUID, m.name
	}
	if podUID == "" {
		return
	}
	r.events.observe(id, podUID, name, state)
	if state == runtime.StateExited && r.hadEarlyExit(id) {
		// The exit was reported early; the CRI's own report comes once
		// containerd has drained the container's output into its log: the
		// agent reads the status again (a termination message taken from
		// the log's tail is then complete).
		r.events.again(id)
	}
}
