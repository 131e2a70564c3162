// Package volume is the node's volume manager: it sets up a pod's volumes
// (emptyDir, hostPath, configMap, secret, downwardAPI, projected,
// persistentVolumeClaim and ephemeral with hostPath, local or CSI PVs,
// inline csi, image),
// keeps the API-data ones current, lists the mounts of one container, and
// tears them down when the pod goes. The pod workers call it through a
// narrow interface; what it needs of the rest of the agent (the objects a
// pod reads, the pods that exist, the image manager) is injected.
//
// Volumes live under the pod's directory, as upstream's
// <pods>/<ns>_<pod>_<uid>/volumes/kubernetes.io~<plugin>/<name>, and so
// exactly as long as the pod UID: the worker removes the directory when it
// finishes. They are set up (or brought up to date) before every container
// start; ConfigMap, Secret, downward API and projected volumes are rewritten
// in place when a watched object changes (Refresh) and every resyncPeriod
// otherwise (labels, annotations, token refresh), with the atomic ..data
// swap (package atomicwriter).
package volume

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
	"github.com/podvisor/podvisor/internal/agent/images"
	"github.com/podvisor/podvisor/internal/agent/volume/atomicwriter"
	"github.com/podvisor/podvisor/internal/agent/volume/claim"
	"github.com/podvisor/podvisor/internal/runtime"
)

// resyncPeriod is how often the API-data volumes of running pods are
// compared with the API, as the kubelet's sync period.
const resyncPeriod = time.Minute

// Objects reads the ConfigMaps and Secrets a pod refers to; the agent
// watches them for the pod, so that a change calls Refresh. A missing one
// is an API NotFound error naming it as upstream (`configmap "x" not found`).
type Objects interface {
	ConfigMap(ctx context.Context, pod types.UID, ns, name string) (*v1.ConfigMap, error)
	Secret(ctx context.Context, pod types.UID, ns, name string) (*v1.Secret, error)
}

// Pods is what the manager needs to know of the pods the agent runs.
type Pods interface {
	// Pod is pod uid as the agent has it now, and whether its volumes are
	// still wanted (the pod has not finished and is still in the API).
	Pod(uid types.UID) (pod *v1.Pod, live bool)
	// Dirs are the names of the directories (under PodsDir) of every pod
	// the agent holds, whether its volumes are set up or not.
	Dirs() map[string]bool
}

// ImageEnsurer makes an image present as its pull policy says
// (images.Manager).
type ImageEnsurer interface {
	Ensure(ctx context.Context, req images.Request) (runtime.Image, error)
}

// Config of the volume manager.
type Config struct {
	NodeName string
	HostIP   string // for the downward API's status.hostIP
	PodsDir  string // where the pods' directories are
	// Allocatable and Node are the node's resources (for the downward API's
	// resourceFieldRef without a limit) and labels (a local PV's node
	// affinity); either may be nil.
	Allocatable func() v1.ResourceList
	Node        func() (*v1.Node, error)
	Client      kubernetes.Interface // claims, PVs and service account tokens; nil: none of them
	Objects     Objects
	Pods        Pods
	// Images ensures the images of image volumes; nil for a runtime without
	// images. PullSecrets are a pod's image pull secrets.
	Images      ImageEnsurer
	PullSecrets func(ctx context.Context, pod *v1.Pod) []v1.Secret
	// CatchUp repeats req while the API server's view of pods lags behind
	// the pod (lagging says which errors that explains); nil: req once.
	CatchUp func(ctx context.Context, pod types.UID, what string, lagging func(error) bool, req func() error) error
	// CSI are the node's registered CSI drivers (nil: none) and CSIRoot
	// the agent directory under which they stage volumes
	// (<CSIRoot>/plugins/kubernetes.io/csi/…, as the kubelet's root).
	CSI      CSIDrivers
	CSIRoot  string
	Recorder record.EventRecorder
	Clock    clock.Clock
	Log      *slog.Logger
}

// Manager sets up, refreshes and tears down the volumes of pods.
type Manager struct {
	cfg   Config
	once  sync.Once
	kicks chan types.UID

	mu     sync.Mutex
	pods   map[types.UID]*podVolumes
	tokens map[tokenKey]cachedToken

	csiLocks csiLocks
}

// podVolumes serialises setup and resync of one pod's volumes.
type podVolumes struct {
	mu  sync.Mutex
	dir string // the pod's directory
	set bool   // set up at least once
	// owned are the local PVs given the pod's fsGroup, once per pod as the
	// kubelet does when it mounts them.
	owned map[string]bool
	// published are the CSI volumes published into the pod (csi.go), by
	// volume name: SetUp publishes each once.
	published map[string]bool
	// expandInUse are the volumes whose driver cannot grow them while
	// mounted (nodeexpand.InUse): not tried again for this pod.
	expandInUse map[string]bool
}

// New validates cfg and makes the manager; Start runs its resync loop.
func New(cfg Config) (*Manager, error) {
	if cfg.Objects == nil || cfg.Pods == nil || cfg.Recorder == nil || cfg.PodsDir == "" {
		return nil, fmt.Errorf("volume: objects, pods, recorder and pods dir are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.CatchUp == nil {
		cfg.CatchUp = func(_ context.Context, _ types.UID, _ string, _ func(error) bool, req func() error) error {
			return req()
		}
	}
	return &Manager{cfg: cfg, kicks: make(chan types.UID, 64), pods: map[types.UID]*podVolumes{}, tokens: map[tokenKey]cachedToken{}}, nil
}

func (vm *Manager) pod(uid types.UID, dir string) *podVolumes {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	pv := vm.pods[uid]
	if pv == nil {
		pv = &podVolumes{dir: dir}
		vm.pods[uid] = pv
	}
	return pv
}

// Refresh asks for the API-data volumes of pod uid to be rewritten from the
// API now (an object it reads changed).
func (vm *Manager) Refresh(uid types.UID) {
	select {
	case vm.kicks <- uid:
	default: // the periodic resync catches up
	}
}

// Start runs the resync loop until ctx ends; calls after the first do
// nothing.
func (vm *Manager) Start(ctx context.Context) {
	vm.once.Do(func() { go vm.loop(ctx) })
}

func (vm *Manager) loop(ctx context.Context) {
	t := vm.cfg.Clock.NewTimer(resyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case uid := <-vm.kicks:
			vm.resync(ctx, uid)
		case <-t.C():
			vm.resyncAll(ctx)
			t.Reset(resyncPeriod)
		}
	}
}

// resyncAll rewrites the API-data volumes of every live pod, forgets the
// pods that are gone and sweeps what they left mounted.
func (vm *Manager) resyncAll(ctx context.Context) {
	vm.mu.Lock()
	uids := make([]types.UID, 0, len(vm.pods))
	for uid := range vm.pods {
		uids = append(uids, uid)
	}
	known := map[types.UID]bool{}
	for _, uid := range uids {
		known[uid] = true
	}
	vm.mu.Unlock()
	// The pods held but not known here are those the agent found running
	// when it started: resync adopts those whose volumes are on disk.
	for name := range vm.cfg.Pods.Dirs() {
		if uid, ok := uidOfDir(name); ok && !known[uid] {
			uids = append(uids, uid)
		}
	}
	for _, uid := range uids {
		vm.resync(ctx, uid)
	}
	live := func(uid types.UID) bool { _, ok := vm.cfg.Pods.Pod(uid); return ok }
	vm.mu.Lock()
	for uid := range vm.pods {
		if !live(uid) {
			delete(vm.pods, uid)
		}
	}
	for k := range vm.tokens {
		if !live(k.pod) {
			delete(vm.tokens, k)
		}
	}
	vm.mu.Unlock()
	vm.sweep()
}

// resync rewrites the API-data volumes of a pod whose volumes are set up
// and grows the filesystems of its expanded claims (csiexpand.go). It never
// creates a volume: a pod that finished meanwhile stays removed.
func (vm *Manager) resync(ctx context.Context, uid types.UID) {
	vm.mu.Lock()
	pv := vm.pods[uid]
	vm.mu.Unlock()
	if pv == nil {
		if pv = vm.adopt(uid); pv == nil {
			return
		}
	}
	pod, live := vm.cfg.Pods.Pod(uid)
	pv.mu.Lock()
	defer pv.mu.Unlock()
	if !live || !pv.set {
		return
	}
	for _, v := range pod.Spec.Volumes {
		plugin := pluginDir(v)
		if plugin == "" || plugin == emptyDirPlugin {
			continue
		}
		dir := filepath.Join(pv.dir, "volumes", plugin, v.Name)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		payload, err := vm.payload(ctx, pod, v)
		if err != nil {
			vm.cfg.Log.Info("volume not updated", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name, "err", err)
			continue
		}
		if changed, err := atomicwriter.Write(dir, payload, vm.cfg.Clock.Now()); err != nil {
			vm.cfg.Log.Warn("volume update failed", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name, "err", err)
		} else if changed {
			vm.cfg.Log.Info("volume updated", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name)
		}
	}
	vm.republishCSI(ctx, pod, pv)
	vm.expandPublished(ctx, pod, pv)
}

// adopt takes over the volumes of a live pod that were set up before the
// agent started (it found the pod running), so that they are kept current
// and its claims grown as if this agent had set them up: without it, a
// running pod's ConfigMap volumes and expanded claims waited for the next
// container start after an agent restart. Nothing is mounted here: the CSI
// volumes count as published only where their target is still a mount
// point (after a reboot it is not, and the next SetUp publishes them
// again). nil when the pod is not live or has no volumes on disk.
func (vm *Manager) adopt(uid types.UID) *podVolumes {
	if _, live := vm.cfg.Pods.Pod(uid); !live {
		return nil
	}
	var dir string
	for name := range vm.cfg.Pods.Dirs() {
		if u, ok := uidOfDir(name); ok && u == uid {
			dir = filepath.Join(vm.cfg.PodsDir, name)
			break
		}
	}
	if dir == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "volumes")); err != nil {
		return nil
	}
	recs, _ := records(dir)
	published := map[string]bool{}
	if len(recs) > 0 {
		points := map[string]bool{}
		for _, p := range mountPoints() {
			points[p] = true
		}
		for _, r := range recs {
			if points[noderequest.PublishPath(dir, r.SpecVolID)] {
				published[r.PodVolume] = true
			}
		}
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if pv := vm.pods[uid]; pv != nil {
		return pv // set up meanwhile
	}
	pv := &podVolumes{dir: dir, set: true, published: published}
	vm.pods[uid] = pv
	vm.cfg.Log.Info("volumes of a running pod adopted", "podUID", uid, "dir", dir, "csiPublished", len(published))
	return pv
}

// uidOfDir is the pod UID in the name of a pod directory,
// <ns>_<name>_<uid> (neither a namespace nor a pod name holds "_").
func uidOfDir(name string) (types.UID, bool) {
	i := strings.LastIndexByte(name, '_')
	if i < 0 || i == len(name)-1 {
		return "", false
	}
	return types.UID(name[i+1:]), true
}

const (
	emptyDirPlugin  = "kubernetes.io~empty-dir"
	configMapPlugin = "kubernetes.io~configmap"
	secretPlugin    = "kubernetes.io~secret"
	downwardPlugin  = "kubernetes.io~downward-api"
	projectedPlugin = "kubernetes.io~projected"
)

// pluginDir names the directory of a volume's kind; "" for hostPath and the
// kinds the process runtime does not have.
func pluginDir(v v1.Volume) string {
	switch {
	case v.EmptyDir != nil:
		return emptyDirPlugin
	case v.ConfigMap != nil:
		return configMapPlugin
	case v.Secret != nil:
		return secretPlugin
	case v.DownwardAPI != nil:
		return downwardPlugin
	case v.Projected != nil:
		return projectedPlugin
	}
	return ""
}

// Paths are the host directories (or files) of a pod's volumes by name; ""
// for an image volume, which the runtime mounts from the image.
type Paths map[string]string

// SetUp makes every volume of the pod, whose directory is podDir, ready and
// returns where each is. A volume that cannot be set up is a FailedMount
// event, as upstream, and a MountError that holds the container back until
// the next retry (sooner when a watched object appears).
func (vm *Manager) SetUp(ctx context.Context, pod *v1.Pod, podDir string) (Paths, error) {
	pv := vm.pod(pod.UID, podDir)
	pv.mu.Lock()
	defer pv.mu.Unlock()
	paths := Paths{}
	for _, v := range pod.Spec.Volumes {
		p, err := vm.setupVolume(ctx, podDir, pod, v, pv)
		if err != nil {
			msg := claim.Event(v.Name, err)
			vm.cfg.Log.Info("volume set-up failed", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "volume", v.Name, "err", err)
			vm.cfg.Recorder.Event(pod, v1.EventTypeWarning, "FailedMount", msg)
			return nil, MountError{containerspec.ConfigError{Msg: msg}}
		}
		paths[v.Name] = p
	}
	pv.set = true
	return paths, nil
}

// MountError is a volume that could not be set up. Upstream keeps the
// container waiting as ContainerCreating with the FailedMount event (no
// Failed event); it unwraps to a containerspec.ConfigError, so that where
// a caller does not tell them apart it is CreateContainerConfigError.
type MountError struct{ containerspec.ConfigError }

func (e MountError) Unwrap() error { return e.ConfigError }

func (vm *Manager) setupVolume(ctx context.Context, podDir string, pod *v1.Pod, v v1.Volume, pv *podVolumes) (string, error) {
	if v.HostPath != nil {
		return v.HostPath.Path, checkHostPath(v.HostPath)
	}
	if v.Image != nil {
		return "", nil // the runtime mounts the image; nothing on disk
	}
	if _, _, ok := claim.Name(pod, &v); ok {
		return vm.setupClaim(ctx, pod, v, pv)
	}
	if v.CSI != nil {
		return vm.setupInlineCSI(ctx, pod, v, pv)
	}
	plugin := pluginDir(v)
	if plugin == "" {
		return "", fmt.Errorf("volume %q: this kind of volume is not supported by the process runtime (supported: emptyDir, configMap, secret, downwardAPI, projected, hostPath, persistentVolumeClaim and ephemeral with hostPath, local or CSI PVs, csi)", v.Name)
	}
	dir := filepath.Join(podDir, "volumes", plugin, v.Name)
	if v.EmptyDir != nil {
		made, err := vm.setupEmptyDir(dir, pod, v.EmptyDir)
		if err == nil && made {
			err = applyFSGroup(dir, pod, false)
		}
		return dir, err
	}
	payload, err := vm.payload(ctx, pod, v)
	if err != nil {
		return "", err
	}
	changed, err := atomicwriter.Write(dir, payload, vm.cfg.Clock.Now())
	if err == nil && changed {
		err = applyFSGroup(dir, pod, true) // new files of a new payload too
	}
	return dir, err
}

// applyFSGroup gives a volume the pod's fsGroup (SetOwnership); a pod
// without one leaves it as made. Volumes of objects (configMap, secret,
// downwardAPI, projected) are read-only for the group.
func applyFSGroup(dir string, pod *v1.Pod, readOnly bool) error {
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.FSGroup == nil {
		return nil
	}
	if err := SetOwnership(dir, *psc.FSGroup, readOnly, psc.FSGroupChangePolicy); err != nil {
		return fmt.Errorf("applying fsGroup %d: %w", *psc.FSGroup, err)
	}
	return nil
}
