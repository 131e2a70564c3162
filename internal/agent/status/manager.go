// Package status publishes pod statuses to the API server: it coalesces
// bursts (only the newest status of a pod is written), retries conflicts and
// failures until the newest status is written, keeps conditions that other
// writers own, and deletes a finished pod object when asked.
package status

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
)

// OwnedConditions are the pod condition types the agent writes; all others
// (readiness gates, DisruptionTarget of others) are kept as the API has them.
var OwnedConditions = map[v1.PodConditionType]bool{
	v1.PodReadyToStartContainers: true,
	v1.PodInitialized:            true,
	v1.ContainersReady:           true,
	v1.PodReady:                  true,
	v1.AllContainersRestarting:   true,
	v1.PodResizePending:          true,
	v1.PodResizeInProgress:       true,
}

// sharedConditions are written by the agent and by others: the agent's
// replaces the API's when it has one, else the API's stays. PodScheduled is
// the scheduler's until the agent rewrites it with the generation it
// observed; DisruptionTarget the agent adds on node shutdown.
var sharedConditions = map[v1.PodConditionType]bool{
	v1.PodScheduled:     true,
	v1.DisruptionTarget: true,
}

// Getter returns the newest copy of a pod the agent knows (from the informer).
type Getter func(uid types.UID) (*v1.Pod, bool)

// Manager is the status manager.
type Manager struct {
	client  kubernetes.Interface
	get     Getter
	log     *slog.Logger
	queue   workqueue.TypedRateLimitingInterface[types.UID]
	mu      sync.Mutex
	pending map[types.UID]*entry
	// OnDeleted, if set, is called after the agent deleted a finished pod object.
	OnDeleted func(uid types.UID)
	// OnWritten, if set, is called with the pod the API returned for each
	// status it accepted (the pod start-up SLI).
	OnWritten func(pod *v1.Pod)
}

type entry struct {
	namespace, name string
	status          v1.PodStatus
	deleteAfter     bool
}

// New makes a status manager; Run starts its workers.
func New(client kubernetes.Interface, get Getter, log *slog.Logger) *Manager {
	return &Manager{
		client: client, get: get, log: log,
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](
			50*time.Millisecond, 10*time.Second)),
		pending: map[types.UID]*entry{},
	}
}

// Set records the newest status of pod. With deleteAfter the pod object is
// deleted (grace 0, UID precondition) once this status is written.
func (m *Manager) Set(pod *v1.Pod, status v1.PodStatus, deleteAfter bool) {
	m.mu.Lock()
	m.pending[pod.UID] = &entry{namespace: pod.Namespace, name: pod.Name, status: status, deleteAfter: deleteAfter}
	m.mu.Unlock()
	m.queue.Add(pod.UID)
}

// Forget drops what is known of a pod that is gone from the API.
func (m *Manager) Forget(uid types.UID) {
	m.mu.Lock()
	delete(m.pending, uid)
	m.mu.Unlock()
}

// Run processes updates with n workers until ctx ends.
func (m *Manager) Run(ctx context.Context, n int) {
	go func() { <-ctx.Done(); m.queue.ShutDown() }()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m.processNext(ctx) {
			}
		}()
	}
	wg.Wait()
}

func (m *Manager) processNext(ctx context.Context) bool {
	uid, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(uid)
	m.mu.Lock()
	e := m.pending[uid]
	m.mu.Unlock()
	if e == nil {
		m.queue.Forget(uid)
		return true
	}
	if err := m.write(ctx, uid, e); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("writing pod status", "pod", e.namespace+"/"+e.name, "err", err)
			m.queue.AddRateLimited(uid)
		}
		return true
	}
	m.queue.Forget(uid)
	m.mu.Lock()
	if m.pending[uid] == e { // nothing newer arrived meanwhile
		delete(m.pending, uid)
	}
	m.mu.Unlock()
	return true
}

func (m *Manager) write(ctx context.Context, uid types.UID, e *entry) error {
	pods := m.client.CoreV1().Pods(e.namespace)
	cur, ok := m.get(uid)
	if !ok {
		var err error
		cur, err = pods.Get(ctx, e.name, metav1.GetOptions{})
		if gone(err) || (err == nil && cur.UID != uid) {
			return nil // gone: nothing to write
		}
		if err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		merged := Merge(cur.Status, e.status)
		if kept := KeepTerminated(cur, &merged); len(kept) > 0 {
			m.log.Warn("a status would have moved terminated containers back; the API's states are kept",
				"pod", e.namespace+"/"+e.name, "containers", kept)
		}
		if !apiequality.Semantic.DeepEqual(cur.Status, merged) {
			upd := cur.DeepCopy()
			upd.Status = merged
			written, err := pods.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
			if err == nil && m.OnWritten != nil {
				m.OnWritten(written)
			}
			if apierrors.IsInvalid(err) {
				// Refused now, refused on every retry: said, and not retried.
				// A finished pod is deleted all the same: the API keeps the
				// last status it accepted.
				m.log.Error("the API refused a pod status", "pod", e.namespace+"/"+e.name, "err", err)
				break
			}
			if apierrors.IsConflict(err) && attempt < 5 {
				cur, err = pods.Get(ctx, e.name, metav1.GetOptions{})
				if gone(err) || (err == nil && cur.UID != uid) {
					return nil
				}
				if err != nil {
					return err
				}
				continue
			}
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
		}
		break
	}
	if e.deleteAfter {
		err := pods.Delete(ctx, e.name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0),
			Preconditions:      &metav1.Preconditions{UID: ptr.To(uid)},
		})
		if err != nil && !gone(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting finished pod: %w", err)
		}
		if m.OnDeleted != nil {
			m.OnDeleted(uid)
		}
	}
	return nil
}

// gone reports an error that says the API holds no pod of that name for
// this node: NotFound, or Forbidden, which is what the node authorizer
// answers a node about any pod not bound to it, a deleted one included.
// Retrying either could only repeat it (and warn every time).
func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
}

// Merge puts the agent's status over the API's, keeping every condition the
// agent does not own as the API has it, and never moving a terminal phase back.
func Merge(api, agent v1.PodStatus) v1.PodStatus {
	out := *agent.DeepCopy()
	var conds []v1.PodCondition
	for _, c := range agent.Conditions {
		if OwnedConditions[c.Type] || sharedConditions[c.Type] {
			conds = append(conds, c)
		}
	}
	for _, c := range api.Conditions {
		if OwnedConditions[c.Type] {
			continue
		}
		if sharedConditions[c.Type] && hasCondition(conds, c.Type) {
			continue
		}
		conds = append(conds, c)
	}
	out.Conditions = conds
	if api.Phase == v1.PodSucceeded || api.Phase == v1.PodFailed {
		out.Phase = api.Phase
	}
	return out
}

// KeepTerminated puts back, in status, the API's terminated state of each
// container that the API server would not let leave it (a container that
// cannot restart: lifecycle.MayLeaveTerminated; any ephemeral container),
// as the kubelet's status manager refuses such a status: the API would
// refuse the whole status, forever. It returns the names of those
// containers.
func KeepTerminated(api *v1.Pod, status *v1.PodStatus) []string {
	var kept []string
	keep := func(list []v1.ContainerStatus, old []v1.ContainerStatus, may func(name string, exitCode int32) bool) {
		for i := range list {
			o := statusNamed(old, list[i].Name)
			if o == nil || o.State.Terminated == nil || list[i].State.Terminated != nil || may(list[i].Name, o.State.Terminated.ExitCode) {
				continue
			}
			list[i].State = *o.State.DeepCopy()
			list[i].Ready = false
			list[i].Started = ptr.To(false)
			kept = append(kept, list[i].Name)
		}
	}
	in := func(containers []v1.Container) func(string, int32) bool {
		return func(name string, exitCode int32) bool {
			for i := range containers {
				if containers[i].Name == name {
					return lifecycle.MayLeaveTerminated(&api.Spec, &containers[i], exitCode)
				}
			}
			return true // not in the spec: the API does not check it
		}
	}
	keep(status.InitContainerStatuses, api.Status.InitContainerStatuses, in(api.Spec.InitContainers))
	keep(status.ContainerStatuses, api.Status.ContainerStatuses, in(api.Spec.Containers))
	keep(status.EphemeralContainerStatuses, api.Status.EphemeralContainerStatuses, func(string, int32) bool { return false })
	return kept
}

func statusNamed(list []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	return nil
}

func hasCondition(conds []v1.PodCondition, t v1.PodConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return true
		}
	}
	return false
}
