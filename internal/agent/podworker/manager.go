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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/hook"
	"github.com/podvisor/podvisor/internal/agent/images"
	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/podcgroup"
	"github.com/podvisor/podvisor/internal/agent/podsecurity"
	"github.com/podvisor/podvisor/internal/agent/timeline"
	"github.com/podvisor/podvisor/internal/agent/volume"
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

// HookRunner runs lifecycle hook handlers (internal/agent/hook.Runner).
type HookRunner interface {
	Run(ctx context.Context, kind hook.Kind, pod *v1.Pod, c *v1.Container, containerID, podIP string, h *v1.LifecycleHandler, budget time.Duration) (string, error)
}

// Config of the pod workers.
type Config struct {
	NodeName string
	HostIP   string
	PodsDir  string // per-pod directories (logs, volumes) live under it
	MaxPods  int32
	// ParallelImagePulls bounds the image pulls at once (images.Config).
	ParallelImagePulls int
	// ImagePullRecordsDir keeps what the pulled-image credential check
	// knows (images.PullRecords); empty: the check is off.
	ImagePullRecordsDir string
	ImageVerification   images.Verification
	Allocatable         func() v1.ResourceList
	// Node returns this node as the API has it (labels, taints, allocatable)
	// for admission; nil: admission knows only Allocatable.
	Node    func() (*v1.Node, error)
	Runtime runtime.Set
	Prober  Prober     // nil: no probes run
	Hooks   HookRunner // nil: hooks are not run
	Status  StatusWriter
	// PullTimes hears of image pulls (the pod start-up SLI); nil: none.
	PullTimes images.PullTimes
	Recorder  record.EventRecorder
	Client    kubernetes.Interface // ConfigMaps, Secrets for containers' env
	Clock     clock.WithDelayedExecution
	Lifecycle lifecycle.Config
	// DNS is the node's side of pods' names and resolv.conf.
	DNS DNSConfig
	// Security is the node's side of containers' securityContext; Sysctls
	// the sysctls it admits (nil: no check).
	Security podsecurity.Node
	Sysctls  *podsecurity.Allowlist
	// Cgroups makes and removes pod-level cgroups; nil: the runtime's
	// default place for containers.
	Cgroups PodCgroups
	// Timeline records what the workers do that no status or event shows
	// (hooks and their durations, stop signals and kills); nil: nothing.
	Timeline Timeline
	// Unrouter tells when the node's service proxy stopped routing to a
	// pod that asked to be stopped only then; nil: no pod waits.
	Unrouter Unrouter
	// CSI are the node's registered CSI drivers and CSIRoot the directory
	// they stage volumes under (volume.Config); nil: CSI volumes wait with
	// FailedMount naming their unregistered driver.
	CSI     volume.CSIDrivers
	CSIRoot string
	Log     *slog.Logger
}

// Timeline is where the workers record steps (timeline.Recorder).
type Timeline interface {
	Record(pod timeline.Pod, entries ...timeline.Entry)
}

// PodCgroups makes a pod's cgroup with its limits, counts its processes,
// and removes it (podcgroup.Manager).
type PodCgroups interface {
	Ensure(parent string, l podcgroup.Limits) error
	Remove(parent string) error
	// Processes counts the tasks in the cgroup; an error for one that is
	// gone.
	Processes(parent string) (int64, error)
	// KillProcesses kills every process in the cgroup and those below it,
	// and returns their PIDs.
	KillProcesses(parent string) ([]int, error)
}

// DNSConfig is KubeletConfiguration's clusterDNS, clusterDomain and
// resolvConf ("" : none, pods with dnsPolicy Default get the node's own
// resolver, 127.0.0.1).
type DNSConfig struct {
	ClusterDNS    []string
	ClusterDomain string
	ResolvConf    string
}

// Manager owns the workers and routes runtime events to them.
type Manager struct {
	cfg Config
	ctx context.Context

	mu      sync.Mutex
	workers map[types.UID]*worker
	// orphans holds what was re-adopted, by pod UID, until a worker claims
	// it or the API confirms its pod is gone.
	orphans map[types.UID]*adopted
	// runtimeName is the scheme of container IDs in pod status.
	runtimeName string
	vols        Volumes
	watches     *objectWatches
	// images pulls containers' images; nil for a runtime without images.
	images *images.Manager
	// extraAdmit, when set, may reject a new pod after the node's checks.
	extraAdmit func(pod *v1.Pod) *v1.PodStatus
}

// New validates cfg and builds the manager. Call Start before feeding pods.
func New(cfg Config) (*Manager, error) {
	if cfg.Status == nil || cfg.Recorder == nil || cfg.PodsDir == "" {
		return nil, fmt.Errorf("podworker: runtime, status, recorder and pods dir are required")
	}
	if err := cfg.Runtime.Check(); err != nil {
		return nil, fmt.Errorf("podworker: %w", err)
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
	m := &Manager{cfg: cfg, workers: map[types.UID]*worker{}, orphans: map[types.UID]*adopted{}, runtimeName: "podvisor"}
	m.watches = newObjectWatches(m)
	if store := cfg.Runtime.Images; store != nil {
		var err error
		icfg := images.Config{Images: store, Recorder: cfg.Recorder, Clock: cfg.Clock, Log: cfg.Log, ParallelPulls: cfg.ParallelImagePulls,
			Verification: cfg.ImageVerification, PullTimes: cfg.PullTimes}
		if cfg.ImagePullRecordsDir != "" {
			if icfg.Records, err = images.OpenPullRecords(cfg.ImagePullRecordsDir); err != nil {
				return nil, err
			}
		}
		if m.images, err = images.New(icfg); err != nil {
			return nil, err
		}
	}
	vols, err := newVolumes(m)
	if err != nil {
		return nil, err
	}
	m.vols = vols
	return m, nil
}

// Start re-adopts what the runtime already runs (an earlier agent's
// containers) and starts routing runtime events. It returns once the
// existing instances are indexed.
func (m *Manager) Start(ctx context.Context) error {
	m.ctx = ctx
	m.vols.Start(ctx)
	go m.pruneWatches(ctx)
	m.runtimeName = m.cfg.Runtime.Info.Name
	sandboxes, err := m.cfg.Runtime.Sandboxes.ListSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("listing sandboxes: %w", err)
	}
	list, err := m.cfg.Runtime.Containers.List(ctx)
	if err != nil {
		return fmt.Errorf("listing containers: %w", err)
	}
	m.mu.Lock()
	for _, sb := range sandboxes {
		a := m.orphanLocked(types.UID(sb.PodUID))
		a.sandboxes = append(a.sandboxes, sb)
	}
	for _, s := range list {
		a := m.orphanLocked(types.UID(s.PodUID))
		a.containers = append(a.containers, s)
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
		case ev, ok := <-m.cfg.Runtime.Events:
			if !ok {
				return
			}
			if !m.route(ctx, ev) {
				go m.retryRoute(ctx, ev)
			}
		}
	}
}

// eventRetries are the pauses before reading again the status an event
// announced, when the read failed (a runtime slow to answer under load) or
// lagged behind the event: an event is sent once, so an exit whose read is
// lost would otherwise wait for the pod's next change.
var eventRetries = []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, time.Second, 3 * time.Second, 10 * time.Second, 30 * time.Second}

func (m *Manager) retryRoute(ctx context.Context, ev runtime.Event) {
	for _, d := range eventRetries {
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(d):
		}
		if m.route(ctx, ev) {
			return
		}
	}
	m.cfg.Log.Warn("runtime event: status not readable, left to the next change", "id", ev.ID, "state", ev.State, "sandbox", ev.Sandbox)
}

// route hands the status an event announces to its pod's worker, or to the
// re-adopted record of a pod no worker claimed yet. It reports false when
// the read should be tried again: it failed other than for a removed
// instance, or it shows an earlier state than the event.
func (m *Manager) route(ctx context.Context, ev runtime.Event) bool {
	if ev.Sandbox {
		return m.routeSandboxEvent(ctx, ev)
	}
	st, err := m.cfg.Runtime.Containers.Status(ctx, ev.ID)
	if err != nil {
		return runtime.IsNotFound(err)
	}
	// Not claimed by a worker yet: the re-adopted record is kept current,
	// or the worker that claims it would wait for an exit already past.
	m.hand(types.UID(st.PodUID), func(w *worker) { w.observe(st) },
		func(a *adopted) { updateInstance(a.containers, st) })
	return st.State >= ev.State
}

// routeSandboxEvent is route for a sandbox's event.
func (m *Manager) routeSandboxEvent(ctx context.Context, ev runtime.Event) bool {
	st, err := m.cfg.Runtime.Sandboxes.SandboxStatus(ctx, ev.ID)
	if err != nil {
		return runtime.IsNotFound(err)
	}
	m.hand(types.UID(st.PodUID), func(w *worker) { w.observeSandbox(st) },
		func(a *adopted) { updateSandbox(a.sandboxes, st) })
	return ev.State != runtime.StateExited || st.State == runtime.SandboxNotReady
}

// hand gives what was read of pod uid to its worker, else to the pod's
// re-adopted record (if any).
func (m *Manager) hand(uid types.UID, toWorker func(*worker), toOrphan func(*adopted)) {
	m.mu.Lock()
	w := m.workers[uid]
	if w == nil {
		if a := m.orphans[uid]; a != nil {
			toOrphan(a)
		}
	}
	m.mu.Unlock()
	if w != nil {
		toWorker(w)
	}
}

// adopted is what the runtime already had of one pod when the agent started.
type adopted struct {
	containers []runtime.Status
	sandboxes  []runtime.SandboxStatus
}

func (m *Manager) orphanLocked(uid types.UID) *adopted {
	a := m.orphans[uid]
	if a == nil {
		a = &adopted{}
		m.orphans[uid] = a
	}
	return a
}

// updateInstance replaces the entry of st.ID in list with st, unless that
// would take it back to an earlier state; it reports whether list has st.ID.
// Two readers of the runtime (the starter and the event router) may deliver
// their reads out of order: the later state (runtime.State is declared in
// lifecycle order) always wins.
func updateInstance(list []runtime.Status, st runtime.Status) bool {
	for i := range list {
		if list[i].ID == st.ID {
			if st.State >= list[i].State {
				list[i] = st
			}
			return true
		}
	}
	return false
}

// UpdatePod is called for every add or update of a pod bound to this node.
func (m *Manager) UpdatePod(pod *v1.Pod) {
	w, created, found := m.ensureWorker(pod)
	if !created {
		w.update(pod)
		return
	}
	if found {
		// A pod the agent found running (a restart) has its volumes
		// adopted now, not at the volume manager's next periodic resync:
		// its ConfigMap volumes waited a minute or more for it.
		m.vols.Refresh(pod.UID)
	}
}

// ensureWorker returns the pod's worker, making and running one (with the
// re-adopted instances of the pod) if there is none yet; found says the new
// worker took over instances the runtime already ran.
func (m *Manager) ensureWorker(pod *v1.Pod) (w *worker, created, found bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.workers[pod.UID]; w != nil {
		return w, false, false
	}
	var a adopted
	if o := m.orphans[pod.UID]; o != nil {
		a = *o
		found = len(a.containers) > 0 || len(a.sandboxes) > 0
	}
	w = newWorker(m, pod, a.containers, a.sandboxes)
	delete(m.orphans, pod.UID)
	m.workers[pod.UID] = w
	go w.run(m.ctx)
	return w, true, found
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

// CleanupOrphans kills and removes the re-adopted instances of pods the API
// no longer has, and removes their directories. Call it once the pod source
// has handed over every pod of its first list. An instance is an orphan only
// when a consistent list of the node's pods confirms that its pod is gone: a
// pod the source has not delivered but the API still has is given a worker
// instead, and when the API cannot be asked every instance is kept for the
// next call. It returns how many pods are still unresolved: instances kept,
// or directories kept while their CSI volumes wait for their drivers (a
// node back from the dead runs its drivers' pods after the agent starts).
func (m *Manager) CleanupOrphans(ctx context.Context) (pending int) {
	m.mu.Lock()
	candidates := make([]types.UID, 0, len(m.orphans))
	for uid := range m.orphans {
		candidates = append(candidates, uid)
	}
	m.mu.Unlock()
	if len(candidates) == 0 {
		return m.removeUnknownPodDirs()
	}
	onNode, err := m.podsOnNode(ctx)
	if err != nil {
		m.cfg.Log.Warn("cannot tell whether the pods of re-adopted containers exist; keeping them", "pods", len(candidates), "err", err)
		return len(candidates)
	}
	for _, uid := range candidates {
		if pod, ok := onNode[uid]; ok {
			// The worker claims the instances; the source's copy wins if it
			// has one.
			if _, created, found := m.ensureWorker(pod); created && found {
				m.vols.Refresh(uid)
			}
			continue
		}
		// The instances stay indexed until now, so that a worker made
		// meanwhile would have claimed them; the API says none will be.
		m.mu.Lock()
		a := m.orphans[uid]
		delete(m.orphans, uid)
		m.mu.Unlock()
		if a == nil {
			continue
		}
		for _, s := range a.containers {
			if s.State == runtime.StateRunning || s.State == runtime.StateCreated {
				m.cfg.Log.Info("killing container of a pod the API no longer has", "podUID", uid, "pod", s.PodNamespace+"/"+s.PodName, "container", s.Name)
				_ = m.cfg.Runtime.Containers.Stop(ctx, s.ID, 0)
			}
			_ = m.cfg.Runtime.Containers.Remove(ctx, s.ID)
		}
		for _, sb := range a.sandboxes {
			_ = m.cfg.Runtime.Sandboxes.RemoveSandbox(ctx, sb.ID)
		}
		m.removeOrphanCgroup(uid, a)
	}
	return m.removeUnknownPodDirs()
}

// removeOrphanCgroup removes the cgroup of a pod the API no longer has,
// whichever QoS class it was of, its instances removed: what is left in
// it is killed (a `runc init` of a start a crash interrupted was seen left
// there, issue 25), as when a worker removes a pod's.
func (m *Manager) removeOrphanCgroup(uid types.UID, a *adopted) {
	if m.cfg.Cgroups == nil {
		return
	}
	name := string(uid) // for the log: the pod's name where an instance has it
	if len(a.containers) > 0 {
		name = a.containers[0].PodNamespace + "/" + a.containers[0].PodName
	}
	for _, qos := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
		if err := m.removePodCgroup(podcgroup.Parent(string(uid), qos), name); err != nil {
			m.cfg.Log.Warn("removing the cgroup of a pod the API no longer has", "podUID", uid, "err", err)
		}
	}
}

// removeUnknownPodDirs removes the directories of pods that have neither a
// worker nor instances waiting to be claimed. It returns how many it had to
// keep: their CSI volumes could not be unpublished yet (volume.TearDown).
func (m *Manager) removeUnknownPodDirs() (kept int) {
	// Read the directory before listing the workers: a directory made after
	// the read belongs to a worker the listing then includes.
	entries, _ := os.ReadDir(m.cfg.PodsDir)
	known := m.knownPodDirs()
	for _, e := range entries {
		if known[e.Name()] {
			continue
		}
		if !m.removePodDir(filepath.Join(m.cfg.PodsDir, e.Name())) {
			kept++
		}
	}
	return kept
}

// removePodDir empties a pod's directory of mounts and removes it; false
// while a CSI volume in it could not be unpublished (volume.TearDown): the
// directory stays, and the volume manager's sweep removes it later.
func (m *Manager) removePodDir(dir string) bool {
	if !m.vols.TearDown(dir) {
		return false
	}
	_ = os.RemoveAll(dir)
	return true
}

// knownPodDirs are the directory names (and UIDs) of the pods that have a
// worker or re-adopted instances waiting to be claimed.
func (m *Manager) knownPodDirs() map[string]bool {
	m.mu.Lock()
	known := map[string]bool{}
	workers := make([]*worker, 0, len(m.workers))
	for uid, w := range m.workers {
		known[string(uid)] = true
		workers = append(workers, w)
	}
	for uid, a := range m.orphans {
		known[string(uid)] = true
		for _, s := range a.containers {
			known[podDirNameOf(s.PodNamespace, s.PodName, uid)] = true
		}
		for _, sb := range a.sandboxes {
			known[podDirNameOf(sb.PodNamespace, sb.PodName, uid)] = true
		}
	}
	m.mu.Unlock()
	// Outside m.mu: a worker's name is read under its own lock.
	for _, w := range workers {
		known[w.podDirName()] = true
	}
	return known
}

// podsOnNode lists the pods bound to this node, by UID, with a consistent
// read: a UID missing from it is a pod the API no longer has. (A node may not
// GET a pod it has no relationship with, so a deleted pod cannot be asked
// about by name: the node authorizer answers Forbidden, not NotFound.)
func (m *Manager) podsOnNode(ctx context.Context) (map[types.UID]*v1.Pod, error) {
	if m.cfg.Client == nil {
		return nil, fmt.Errorf("no API client")
	}
	list, err := m.cfg.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", m.cfg.NodeName).String(),
	})
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]*v1.Pod, len(list.Items))
	for i := range list.Items {
		if pod := &list.Items[i]; pod.Spec.NodeName == m.cfg.NodeName {
			out[pod.UID] = pod
		}
	}
	return out, nil
}

func (m *Manager) removeWorker(uid types.UID) {
	m.mu.Lock()
	delete(m.workers, uid)
	m.mu.Unlock()
	m.cfg.Status.Forget(uid)
	m.retryDeferredResizes(uid) // its resources are free
}

// watchPrunePeriod is how often the ConfigMap and Secret watches of pods
// that are gone are stopped. Not at once when a worker ends: a pod made
// again under the same name (a StatefulSet's, a Job's retry) would read
// through a new watch before it has synced and find its objects missing
// (TestRecreatedPodsStartPromptly saw FailedMount for kube-root-ca.crt).
const watchPrunePeriod = time.Minute

// pruneWatches stops the watches no worker needs, every watchPrunePeriod.
func (m *Manager) pruneWatches(ctx context.Context) {
	t := m.cfg.Clock.NewTimer(watchPrunePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			m.watches.prune(func(uid types.UID) bool { return m.worker(uid) != nil })
			t.Reset(watchPrunePeriod)
		}
	}
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
		out = append(out, w.allocatedPod())
	}
	return out
}

// ProbeUpdate delivers a probe verdict for one container instance.
func (m *Manager) ProbeUpdate(uid types.UID, container, containerID string, state lifecycle.ProbeState) {
	if w := m.worker(uid); w != nil {
		w.probeUpdate(container, containerID, state)
	}
}
