package eviction

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// Upstream's pauses: after an eviction the manager waits (polling every
// second) up to 30 s for the pod to be cleaned up before the next round.
const (
	cleanupTimeout  = 30 * time.Second
	cleanupPollFreq = time.Second
)

// Eviction is how the manager stops a pod: the pod ends Failed with reason
// and message; condition, when set, is added to its conditions.
type Eviction struct {
	Grace     time.Duration
	Message   string
	Condition *v1.PodCondition
}

// Config is what the manager needs.
type Config struct {
	Settings Settings
	Period   time.Duration // between rounds (upstream: 10 s)
	// LocalStorage enables per-pod local storage limits (on upstream by default).
	LocalStorage bool
	Observe      func() Observations
	Stats        func(ctx context.Context, pods []*v1.Pod) StatsFunc
	ActivePods   func() []*v1.Pod
	// Evict starts evicting a pod; the channel closes when it has stopped.
	Evict       func(uid types.UID, e Eviction) <-chan struct{}
	SetPressure func([]v1.NodeConditionType) // node conditions
	QOS         func(*v1.Pod) v1.PodQOSClass
	Recorder    record.EventRecorder
	NodeName    string
	Clock       clock.WithTicker
	Log         *slog.Logger
}

// Manager runs the eviction rounds and answers admission.
type Manager struct {
	cfg Config

	mu         sync.Mutex
	state      State
	conditions []v1.NodeConditionType
}

// New validates cfg and fills defaults.
func New(cfg Config) (*Manager, error) {
	if cfg.Observe == nil || cfg.Stats == nil || cfg.ActivePods == nil || cfg.Evict == nil || cfg.Recorder == nil || cfg.QOS == nil {
		return nil, fmt.Errorf("eviction: observe, stats, active pods, evict, qos and recorder are required")
	}
	if cfg.Period <= 0 {
		cfg.Period = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.SetPressure == nil {
		cfg.SetPressure = func([]v1.NodeConditionType) {}
	}
	return &Manager{cfg: cfg}, nil
}

// Admit is the admission check (for podworker's SetAdmission): nil admits.
func (m *Manager) Admit(pod *v1.Pod) *v1.PodStatus {
	m.mu.Lock()
	conds := m.conditions
	m.mu.Unlock()
	msg, ok := Admit(conds, pod, m.cfg.QOS(pod))
	if ok {
		return nil
	}
	m.cfg.Log.Info("pod refused under node pressure", "pod", pod.Namespace+"/"+pod.Name, "conditions", fmt.Sprint(conds))
	return &v1.PodStatus{Phase: v1.PodFailed, Reason: Reason, Message: msg}
}

// Run does a round every period until ctx ends; after an eviction it waits
// for the pod to stop (at most 30 s) and goes on at once, as upstream.
func (m *Manager) Run(ctx context.Context) {
	if len(m.cfg.Settings.Thresholds) == 0 && !m.cfg.LocalStorage {
		return
	}
	for {
		stopped := m.synchronize(ctx)
		if len(stopped) > 0 {
			m.waitStopped(ctx, stopped)
		} else {
			select {
			case <-ctx.Done():
				return
			case <-m.cfg.Clock.After(m.cfg.Period):
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (m *Manager) waitStopped(ctx context.Context, chans []<-chan struct{}) {
	timeout := m.cfg.Clock.NewTimer(cleanupTimeout)
	defer timeout.Stop()
	for _, ch := range chans {
		select {
		case <-ch:
		case <-timeout.C():
			m.cfg.Log.Info("eviction: timed out waiting for evicted pods to stop")
			return
		case <-ctx.Done():
			return
		}
	}
}

// synchronize is one round; it returns the channels of the pods it evicted.
func (m *Manager) synchronize(ctx context.Context) []<-chan struct{} {
	now := m.cfg.Clock.Now()
	obs := m.cfg.Observe()
	pods := m.cfg.ActivePods()
	stats := m.cfg.Stats(ctx, pods)

	m.mu.Lock()
	next, d := Decide(m.cfg.Settings, m.state, obs, now)
	m.state = next
	changed := fmt.Sprint(d.Conditions) != fmt.Sprint(m.conditions)
	m.conditions = d.Conditions
	m.mu.Unlock()
	if changed {
		m.cfg.Log.Info("node pressure", "conditions", fmt.Sprint(d.Conditions))
		m.cfg.SetPressure(d.Conditions)
	}

	if m.cfg.LocalStorage {
		var out []<-chan struct{}
		for _, pod := range pods {
			st, ok := stats(pod)
			if !ok {
				continue
			}
			if msg := LocalStorage(pod, st); msg != "" {
				// Upstream adds no DisruptionTarget condition here.
				if ch := m.evict(pod, immediateGraceSeconds, msg, nil, nil); ch != nil {
					out = append(out, ch)
				}
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	if d.Reclaim == nil {
		return nil
	}
	m.cfg.Recorder.Eventf(&v1.ObjectReference{Kind: "Node", Name: m.cfg.NodeName, UID: types.UID(m.cfg.NodeName)},
		v1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", d.Resource)
	if len(pods) == 0 {
		m.cfg.Log.Info("eviction: thresholds met but no pod is active to evict")
		return nil
	}
	Rank(d.Reclaim.Signal, pods, stats)
	// At most one pod per round, as upstream.
	for _, pod := range pods {
		msg, ann := Message(d, obs, pod, stats)
		cond := &v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonTerminationByKubelet, Message: msg}
		if ch := m.evict(pod, PodGrace(m.cfg.Settings, *d.Reclaim, pod), msg, ann, cond); ch != nil {
			return []<-chan struct{}{ch}
		}
	}
	m.cfg.Log.Info("eviction: unable to evict any pod")
	return nil
}

func (m *Manager) evict(pod *v1.Pod, graceSeconds int64, msg string, ann map[string]string, cond *v1.PodCondition) <-chan struct{} {
	if Critical(pod) {
		m.cfg.Log.Error("eviction: cannot evict a critical pod", "pod", pod.Namespace+"/"+pod.Name)
		return nil
	}
	m.cfg.Recorder.AnnotatedEventf(pod, ann, v1.EventTypeWarning, Reason, "%s", msg)
	m.cfg.Log.Info("evicting pod", "pod", pod.Namespace+"/"+pod.Name, "message", msg)
	return m.cfg.Evict(pod.UID, Eviction{Grace: time.Duration(graceSeconds) * time.Second, Message: msg, Condition: cond})
}
