// Package shutdown is the agent's graceful node shutdown: when the machine is
// about to go down (systemd-logind's PrepareForShutdown, or `podvisor node
// shutdown`), it marks the node NotReady, rejects new pods and stops the
// running ones band by band, from the lowest pod priority up.
//
//	idle --Shutdown--> shutting down --all bands done--> shut down (node stays NotReady)
//	  ^                      |                                  |
//	  +------Cancel----------+----------------Cancel------------+
//
// A cancel makes the node Ready and admits pods again; pods already stopped
// stay stopped (their controllers replace them), as upstream.
package shutdown

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/node"
	"github.com/podvisor/podvisor/internal/agent/podworker"
)

// Upstream's words, which users and tools match on.
const (
	NotReadyMessage  = "node is shutting down"
	RejectReason     = "NodeShutdown"
	RejectMessage    = "Pod was rejected as the node is shutting down."
	TerminateReason  = "Terminated"
	TerminateMessage = "Pod was terminated in response to imminent node shutdown."
	// EventReason is the reason of the node's events about shutdown.
	EventReason = "NodeShutdown"
)

// ErrNotConfigured is returned by Shutdown when no grace period is set.
var ErrNotConfigured = errors.New("graceful node shutdown is not enabled: set shutdownGracePeriod (and shutdownGracePeriodCriticalPods) or shutdownGracePeriodByPodPriority in the agent's KubeletConfiguration")

// Pods is what the manager needs of the pod workers.
type Pods interface {
	ActivePods() []*v1.Pod
	TerminatePod(uid types.UID, t podworker.Termination) <-chan struct{}
}

// Node is what the manager needs of the node status.
type Node interface {
	SetReadiness(node.Readiness)
}

// Config is what the manager needs.
type Config struct {
	Bands     []Band // from Bands(kubelet config); empty means off
	Pods      Pods
	Node      Node
	Recorder  record.EventRecorder
	NodeName  string
	StateFile string                // e.g. <data>/agent/graceful_node_shutdown_state
	Metrics   prometheus.Registerer // optional
	Clock     clock.Clock
	Log       *slog.Logger
}

// Manager runs graceful node shutdowns. Its methods are safe for concurrent use.
type Manager struct {
	cfg     Config
	nodeRef *v1.ObjectReference
	metrics *metrics

	mu       sync.Mutex
	run      *run // the current or last shutdown; nil before the first
	shutting bool // between Shutdown and Cancel
}

// run is one shutdown from its start to its end or cancellation.
type run struct {
	cancel chan struct{} // closed by Cancel
	done   chan struct{} // closed when no band is waited on any more
}

// New validates cfg, fills defaults and publishes the state of the last
// shutdown (from the state file) in the metrics.
func New(cfg Config) (*Manager, error) {
	if cfg.Pods == nil || cfg.Node == nil || cfg.Recorder == nil || cfg.NodeName == "" {
		return nil, errors.New("shutdown: pods, node, recorder and node name are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	m := &Manager{
		cfg: cfg,
		// The kubelet refers to its node by name, with the name as UID.
		nodeRef: &v1.ObjectReference{Kind: "Node", Name: cfg.NodeName, UID: types.UID(cfg.NodeName)},
	}
	var err error
	if m.metrics, err = newMetrics(cfg.Metrics); err != nil {
		return nil, err
	}
	if cfg.StateFile != "" {
		st, err := loadState(cfg.StateFile)
		if err != nil {
			cfg.Log.Warn("reading graceful shutdown state", "file", cfg.StateFile, "err", err)
		}
		m.metrics.set(st)
	}
	if len(cfg.Bands) > 0 {
		cfg.Log.Info("graceful node shutdown enabled", "bands", describeBands(cfg.Bands), "total", Total(cfg.Bands))
	}
	return m, nil
}

// Enabled reports whether any grace period is configured.
func (m *Manager) Enabled() bool { return len(m.cfg.Bands) > 0 }

// ShuttingDown reports whether a shutdown started and was not cancelled.
func (m *Manager) ShuttingDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shutting
}

// isCurrent reports whether done belongs to the shutdown under way.
func (m *Manager) isCurrent(done <-chan struct{}) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shutting && m.run.done == done
}

// Admit rejects every new pod while the node is shutting down (install it
// with podworker.Manager.SetAdmission).
func (m *Manager) Admit(*v1.Pod) *v1.PodStatus {
	if !m.ShuttingDown() {
		return nil
	}
	return &v1.PodStatus{Phase: v1.PodFailed, Reason: RejectReason, Message: RejectMessage}
}

// Shutdown starts a shutdown, or joins the one under way; the channel is
// closed when it has ended (every band done, or cancelled). source names the
// trigger in logs ("logind", "command").
func (m *Manager) Shutdown(source string) (<-chan struct{}, error) {
	if !m.Enabled() {
		return nil, ErrNotConfigured
	}
	m.mu.Lock()
	if m.shutting {
		done := m.run.done
		m.mu.Unlock()
		return done, nil
	}
	r := &run{cancel: make(chan struct{}), done: make(chan struct{})}
	m.run, m.shutting = r, true
	m.mu.Unlock()

	m.cfg.Log.Info("node shutdown detected: stopping pods", "source", source, "total", Total(m.cfg.Bands))
	m.cfg.Recorder.Event(m.nodeRef, v1.EventTypeNormal, EventReason, "Shutdown manager detected shutdown event")
	m.cfg.Node.SetReadiness(node.Readiness{Ready: false, Message: NotReadyMessage})
	start := m.cfg.Clock.Now()
	m.record(State{StartTime: start})
	go m.stopPods(r, start)
	return r.done, nil
}

// Cancel ends a shutdown: no further band is started, the node is Ready and
// admits pods again. Pods already told to stop are not brought back.
// It returns false when no shutdown was under way.
func (m *Manager) Cancel(source string) bool {
	m.mu.Lock()
	if !m.shutting {
		m.mu.Unlock()
		return false
	}
	m.shutting = false
	close(m.run.cancel)
	m.mu.Unlock()

	m.cfg.Log.Info("node shutdown cancelled", "source", source)
	m.cfg.Recorder.Event(m.nodeRef, v1.EventTypeNormal, EventReason, "Shutdown manager detected shutdown cancellation")
	m.cfg.Node.SetReadiness(node.Readiness{Ready: true})
	return true
}

// stopPods stops the pods active at the start, band by band from the lowest
// priority: each band waits until its pods have stopped or its period has
// passed; empty bands are skipped at once.
func (m *Manager) stopPods(r *run, start time.Time) {
	defer func() {
		m.record(State{StartTime: start, EndTime: m.cfg.Clock.Now()})
		close(r.done)
	}()
	for _, g := range Groups(m.cfg.Bands, m.cfg.Pods.ActivePods()) {
		if len(g.Pods) == 0 {
			continue
		}
		select {
		case <-r.cancel:
			return
		default:
		}
		m.cfg.Log.Info("node shutdown: stopping pods", "priority", g.Priority, "period", g.Period, "pods", len(g.Pods))
		stopped := make([]<-chan struct{}, 0, len(g.Pods))
		for _, pod := range g.Pods {
			stopped = append(stopped, m.cfg.Pods.TerminatePod(pod.UID, m.termination(pod, g.Band)))
		}
		timer := m.cfg.Clock.NewTimer(g.Period)
		all := allClosed(stopped)
		select {
		case <-all:
		case <-timer.C():
			m.cfg.Log.Info("node shutdown: band period over, moving on", "priority", g.Priority, "period", g.Period)
		case <-r.cancel:
		}
		timer.Stop()
	}
	m.cfg.Log.Info("node shutdown: all pods stopped", "took", m.cfg.Clock.Since(start))
}

func (m *Manager) termination(pod *v1.Pod, b Band) podworker.Termination {
	return podworker.Termination{
		Grace:   Grace(pod, b),
		Reason:  TerminateReason,
		Message: TerminateMessage,
		Condition: &v1.PodCondition{
			Type:               v1.DisruptionTarget,
			ObservedGeneration: pod.Generation, // as upstream's shutdown manager
			Status:             v1.ConditionTrue,
			Reason:             v1.PodReasonTerminationByKubelet,
			Message:            TerminateMessage,
			LastTransitionTime: metav1.NewTime(m.cfg.Clock.Now()),
		},
	}
}

// record publishes st in the metrics and the state file.
func (m *Manager) record(st State) {
	m.metrics.set(st)
	if m.cfg.StateFile == "" {
		return
	}
	if err := saveState(m.cfg.StateFile, st); err != nil {
		m.cfg.Log.Warn("writing graceful shutdown state", "file", m.cfg.StateFile, "err", err)
	}
}

// Status is the manager's state as the agent API reports it.
type Status struct {
	Enabled      bool       `json:"enabled"`
	ShuttingDown bool       `json:"shuttingDown"`
	StartTime    *time.Time `json:"startTime,omitempty"`
	EndTime      *time.Time `json:"endTime,omitempty"`
	Bands        []string   `json:"bands,omitempty"`
}

// Status reports whether a shutdown is under way and when the last one
// started and ended.
func (m *Manager) Status() Status {
	s := Status{Enabled: m.Enabled(), ShuttingDown: m.ShuttingDown(), Bands: describeBands(m.cfg.Bands)}
	st := m.metrics.state()
	if !st.StartTime.IsZero() {
		s.StartTime = &st.StartTime
	}
	if !st.EndTime.IsZero() {
		s.EndTime = &st.EndTime
	}
	return s
}

// allClosed returns a channel closed once every channel in chs is closed.
func allClosed(chs []<-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		for _, ch := range chs {
			<-ch
		}
		close(out)
	}()
	return out
}
