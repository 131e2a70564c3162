// Package podworker runs one goroutine per pod UID that loops snapshot →
// lifecycle.Compute → execute the plan, woken by spec changes, container
// events, probe results and timers — never by a periodic relist.
package podworker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/hook"
	"github.com/podvisor/podvisor/internal/lifecycle"
	"github.com/podvisor/podvisor/internal/runtime"
)

// StatusWriter is the status manager as the workers see it.
type StatusWriter interface {
	Set(pod *v1.Pod, status v1.PodStatus, deleteAfter bool)
	Forget(uid types.UID)
}

// Prober runs a container's probes; results come back through ProbeUpdate.
type Prober interface {
	AddContainer(pod *v1.Pod, c *v1.Container, containerID string, startedAt time.Time, podIP string, adopted bool)
	RemoveContainer(containerID string)
	SetTerminating(podUID types.UID)
}

// HookRunner runs lifecycle hook handlers (internal/hook.Runner).
type HookRunner interface {
	Run(ctx context.Context, kind hook.Kind, pod *v1.Pod, c *v1.Container, containerID, podIP string, h *v1.LifecycleHandler, budget time.Duration) (string, error)
}

// Config of the pod workers.
type Config struct {
	NodeName    string
	HostIP      string
	PodsDir     string // per-pod directories (logs, volumes) live under it
	MaxPods     int32
	Allocatable func() v1.ResourceList
	// Node returns this node as the API has it (labels, taints, allocatable)
	// for admission; nil: admission knows only Allocatable.
	Node      func() (*v1.Node, error)
	Runtime   runtime.Runtime
	Prober    Prober     // nil: no probes run
	Hooks     HookRunner // nil: hooks are not run
	Status    StatusWriter
	Recorder  record.EventRecorder
	Client    kubernetes.Interface // ConfigMaps, Secrets for containers' env
	Clock     clock.WithDelayedExecution
	Lifecycle lifecycle.Config
	Log       *slog.Logger
}

// Manager owns the workers and routes runtime events to them.
type Manager struct {
	cfg Config
	ctx context.Context

	mu      sync.Mutex
	workers map[types.UID]*worker
	// byPod indexes runtime instances by pod UID until a worker claims them.
	orphans map[types.UID][]runtime.Status
	vols    *volumeManager
	// extraAdmit, when set, may reject a new pod after the node's checks.
	extraAdmit func(pod *v1.Pod) *v1.PodStatus
}

// New validates cfg and builds the manager. Call Start before feeding pods.
func New(cfg Config) (*Manager, error) {
	if cfg.Runtime == nil || cfg.Status == nil || cfg.Recorder == nil || cfg.PodsDir == "" {
		return nil, fmt.Errorf("podworker: runtime, status, recorder and pods dir are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Lifecycle.InitialBackOff == 0 {
		cfg.Lifecycle = lifecycle.DefaultConfig()
	}
	if cfg.HostIP == "" {
		cfg.HostIP = "127.0.0.1"
	}
	m := &Manager{cfg: cfg, workers: map[types.UID]*worker{}, orphans: map[types.UID][]runtime.Status{}}
	m.vols = newVolumeManager(m)
	return m, nil
}

// Start re-adopts what the runtime already runs (an earlier agent's
// containers) and starts routing runtime events. It returns once the
// existing instances are indexed.
func (m *Manager) Start(ctx context.Context) error {
	m.ctx = ctx
	list, err := m.cfg.Runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("listing containers: %w", err)
	}
	m.mu.Lock()
	for _, s := range list {
		uid := types.UID(s.PodUID)
		m.orphans[uid] = append(m.orphans[uid], s)
	}
	m.mu.Unlock()
	go m.routeEvents(ctx)
	return nil
}

func (m *Manager) routeEvents(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-m.cfg.Runtime.Events():
			if !ok {
				return
			}
			st, err := m.cfg.Runtime.Status(ctx, ev.ID)
			if err != nil {
				continue
			}
			m.mu.Lock()
			w := m.workers[types.UID(st.PodUID)]
			m.mu.Unlock()
			if w != nil {
				w.observe(st)
			}
		}
	}
}

// UpdatePod is called for every add or update of a pod bound to this node.
func (m *Manager) UpdatePod(pod *v1.Pod) {
	m.mu.Lock()
	w := m.workers[pod.UID]
	if w == nil {
		w = newWorker(m, pod, m.orphans[pod.UID])
		delete(m.orphans, pod.UID)
		m.workers[pod.UID] = w
		m.mu.Unlock()
		go w.run(m.ctx)
		return
	}
	m.mu.Unlock()
	w.update(pod)
}

// RemovePod is called when the pod object is gone from the API (deleted by
// the agent after it finished, or force-deleted): its containers are stopped
// with the minimum grace and everything of it is removed.
func (m *Manager) RemovePod(pod *v1.Pod) {
	m.mu.Lock()
	w := m.workers[pod.UID]
	m.mu.Unlock()
	if w != nil {
		w.markGone()
	}
}

// Pods returns the pods the workers hold (for the agent API).
func (m *Manager) Pods() []*v1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*v1.Pod, 0, len(m.workers))
	for _, w := range m.workers {
		out = append(out, w.currentPod())
	}
	return out
}

// Worker returns the worker of a pod UID, if any (for the agent API and probes).
func (m *Manager) worker(uid types.UID) *worker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workers[uid]
}

// CleanupOrphans kills and removes instances of pods the API no longer has,
// and removes their directories. Call it once the pod informer has synced.
func (m *Manager) CleanupOrphans(ctx context.Context) {
	m.mu.Lock()
	orphans := m.orphans
	m.orphans = map[types.UID][]runtime.Status{}
	known := map[string]bool{}
	for uid, w := range m.workers {
		known[string(uid)] = true
		known[w.podDirName()] = true
	}
	m.mu.Unlock()
	for uid, list := range orphans {
		for _, s := range list {
			if s.State == runtime.StateRunning || s.State == runtime.StateCreated {
				m.cfg.Log.Info("killing container of a pod the API no longer has", "podUID", uid, "container", s.Name)
				_ = m.cfg.Runtime.Stop(ctx, s.ID, 9, 0)
			}
			_ = m.cfg.Runtime.Remove(ctx, s.ID)
		}
	}
	entries, _ := os.ReadDir(m.cfg.PodsDir)
	for _, e := range entries {
		if !known[e.Name()] {
			unmountUnder(filepath.Join(m.cfg.PodsDir, e.Name()))
			_ = os.RemoveAll(filepath.Join(m.cfg.PodsDir, e.Name()))
		}
	}
}

func (m *Manager) removeWorker(uid types.UID) {
	m.mu.Lock()
	delete(m.workers, uid)
	m.mu.Unlock()
	m.cfg.Status.Forget(uid)
}

// activePods counts admitted pods that are not terminal, for admission.
func (m *Manager) activePods(except types.UID) []*v1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*v1.Pod
	for uid, w := range m.workers {
		if uid == except || !w.isActive() {
			continue
		}
		out = append(out, w.currentPod())
	}
	return out
}

// ProbeUpdate delivers a probe verdict for one container instance.
func (m *Manager) ProbeUpdate(uid types.UID, container, containerID string, state lifecycle.ProbeState) {
	if w := m.worker(uid); w != nil {
		w.probeUpdate(container, containerID, state)
	}
}
