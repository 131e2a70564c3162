package probe

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/podref"
)

// Manager schedules and runs the probes of every running container instance.
// All methods are safe for concurrent use.
type Manager struct {
	cfg Config
	env env

	mu         sync.Mutex
	containers map[string]*container // by container ID
	pods       map[types.UID]*podEntry
	queue      taskHeap
	wake       chan struct{} // the earliest due time may have changed

	dirty      []string // container IDs whose state changed, in order
	dirtySet   map[string]bool
	notify     chan struct{}
	delivering bool

	// For tests: the scheduler is waiting and no run is in flight.
	idle     bool
	inflight atomic.Int64
}

type podEntry struct {
	containers  map[string]bool
	terminating bool
}

// New validates cfg, fills its defaults and builds the manager. Call Run.
func New(cfg Config) (*Manager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Manager{
		cfg:        cfg,
		env:        env{exec: cfg.Exec, http: newHTTPProber(), userAgent: "kube-probe/" + cfg.KubeMinorVersion},
		containers: map[string]*container{},
		pods:       map[types.UID]*podEntry{},
		wake:       make(chan struct{}, 1),
		dirtySet:   map[string]bool{},
		notify:     make(chan struct{}, 1),
	}, nil
}

// AddContainer starts probing an instance that is running (its postStart hook
// done). startedAt is when it started; podIP is the default host of HTTP, TCP
// and gRPC probes. adopted is true for an instance re-adopted after an agent
// restart: its first run is then spread over one period so a restarted agent
// does not probe everything at once. Adding a known ID does nothing. A
// container without probes is not tracked: the core needs nothing from us.
func (m *Manager) AddContainer(pod *v1.Pod, c *v1.Container, containerID string, startedAt time.Time, podIP string, adopted bool) {
	probes := map[kind]*v1.Probe{startup: c.StartupProbe, liveness: c.LivenessProbe, readiness: c.ReadinessProbe}
	if c.StartupProbe == nil && c.LivenessProbe == nil && c.ReadinessProbe == nil {
		return
	}
	ct := &container{
		id:        containerID,
		podUID:    pod.UID,
		name:      c.Name,
		ref:       podref.Container(pod, c.Name),
		startedAt: startedAt,
		kill:      map[kind]string{liveness: killMessage(liveness, pod, c), startup: killMessage(startup, pod, c)},
	}
	for k, p := range probes {
		if p == nil {
			continue
		}
		t := timingOf(k, p)
		ct.tasks[k] = &task{c: ct, kind: k, timing: t, index: -1,
			action: newAction(m.env, t, p, c, containerID, podIP)}
	}
	// Without a startup probe the container counts as started at once.
	ct.state.Started = c.StartupProbe == nil

	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.containers[containerID]; ok {
		return
	}
	m.containers[containerID] = ct
	pe := m.pods[pod.UID]
	if pe == nil {
		pe = &podEntry{containers: map[string]bool{}}
		m.pods[pod.UID] = pe
	}
	pe.containers[containerID] = true

	now := m.cfg.Clock.Now()
	first := func(t *task) time.Time {
		at := ct.firstRun(t, now)
		if adopted && !at.After(now) {
			at = now.Add(m.cfg.Jitter(t.timing.period))
		}
		return at
	}
	for _, t := range ct.tasks {
		if t != nil && (t.kind == startup || ct.state.Started) {
			m.push(t, first(t))
		}
	}
	if pe.terminating || pod.DeletionTimestamp != nil {
		pe.terminating = true
		m.ready(ct, ct.terminate(), now)
	}
	if ct.state != (lifecycle.ProbeState{}) {
		m.markDirty(ct)
	}
	m.cfg.Log.Debug("probing container", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "containerID", containerID, "adopted", adopted)
}

// RemoveContainer stops every probe of an instance (it exited or was
// removed). A run in flight is discarded.
func (m *Manager) RemoveContainer(containerID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.containers[containerID]
	if !ok {
		return
	}
	for _, t := range c.tasks {
		if t != nil {
			t.stopped = true
		}
	}
	m.sweep(c)
	delete(m.containers, containerID)
	if pe := m.pods[c.podUID]; pe != nil {
		delete(pe.containers, containerID)
		if len(pe.containers) == 0 {
			delete(m.pods, c.podUID)
		}
	}
}

// SetTerminating stops liveness and startup probes of the pod's instances,
// now and for instances added while the pod still has some; readiness keeps
// running (§6).
func (m *Manager) SetTerminating(podUID types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pe := m.pods[podUID]
	if pe == nil || pe.terminating {
		return
	}
	pe.terminating = true
	now := m.cfg.Clock.Now()
	for id := range pe.containers {
		c := m.containers[id]
		before := c.state
		m.ready(c, c.terminate(), now)
		if !sameState(before, c.state) {
			m.markDirty(c)
		}
	}
}

// State is the current verdict for an instance; the zero value for an
// instance that is not tracked.
func (m *Manager) State(containerID string) lifecycle.ProbeState {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.containers[containerID]; ok {
		return c.update().State
	}
	return lifecycle.ProbeState{}
}

// ready schedules probes that were gated until the container started and
// drops stopped ones from the heap. Readiness runs at once, as upstream
// triggers it on startup success; liveness waits for its next period.
func (m *Manager) ready(c *container, ungated []*task, now time.Time) {
	for _, t := range ungated {
		at := c.firstRun(t, now)
		if t.kind == liveness {
			at = c.firstRun(t, now.Add(t.timing.period))
		}
		m.push(t, at)
	}
	m.sweep(c)
}

// sweep removes c's stopped probes from the heap.
func (m *Manager) sweep(c *container) {
	for _, t := range c.tasks {
		if t != nil && t.stopped && t.index >= 0 {
			heap.Remove(&m.queue, t.index)
		}
	}
}

// push schedules t at at and wakes the scheduler if t is now the earliest.
func (m *Manager) push(t *task, at time.Time) {
	if t.stopped {
		return
	}
	t.next = at
	heap.Push(&m.queue, t)
	if t.index == 0 {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

func (m *Manager) markDirty(c *container) {
	if !m.dirtySet[c.id] {
		m.dirtySet[c.id] = true
		m.dirty = append(m.dirty, c.id)
	}
	select {
	case m.notify <- struct{}{}:
	default:
	}
}
