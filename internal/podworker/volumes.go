package podworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/volume"
	"github.com/podvisor/podvisor/internal/volume/claim"
)

// Volumes live under the pod's directory, as upstream's
// <pods>/<ns>_<pod>_<uid>/volumes/kubernetes.io~<plugin>/<name>, and so
// exactly as long as the pod UID: the worker removes the directory when it
// finishes. They are set up (or brought up to date) before every container
// start; ConfigMap, Secret, downward API and projected volumes are rewritten
// in place when a watched object changes and every resyncPeriod otherwise
// (labels, annotations, token refresh), with the atomic ..data swap.

// resyncPeriod is how often the API-data volumes of running pods are
// compared with the API, as the kubelet's sync period.
const resyncPeriod = time.Minute

// volumeManager is the Manager's volume state.
type volumeManager struct {
	m       *Manager
	watches objectWatches
	once    sync.Once
	kicks   chan types.UID

	mu     sync.Mutex
	pods   map[types.UID]*podVolumes
	tokens map[tokenKey]cachedToken
}

// podVolumes serialises setup and resync of one pod's volumes.
type podVolumes struct {
	mu  sync.Mutex
	set bool // set up at least once
	// owned are the local PVs given the pod's fsGroup, once per pod as the
	// kubelet does when it mounts them.
	owned map[string]bool
}

// newVolumeManager makes the Manager's volume state.
func newVolumeManager(m *Manager) *volumeManager {
	vm := &volumeManager{m: m, kicks: make(chan types.UID, 64), pods: map[types.UID]*podVolumes{}, tokens: map[tokenKey]cachedToken{}}
	vm.watches = objectWatches{m: m, watches: map[objectKey]*objectWatch{}}
	return vm
}

// volumes returns the Manager's volume state.
func (m *Manager) volumes() *volumeManager { return m.vols }

func (vm *volumeManager) pod(uid types.UID) *podVolumes {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	pv := vm.pods[uid]
	if pv == nil {
		pv = &podVolumes{}
		vm.pods[uid] = pv
	}
	return pv
}

// kick asks for the volumes of pod uid to be rewritten from the API now.
func (vm *volumeManager) kick(uid types.UID) {
	select {
	case vm.kicks <- uid:
	default: // the periodic resync catches up
	}
}

// start runs the resync loop once the manager runs.
func (vm *volumeManager) start() {
	if vm.m.ctx == nil {
		return
	}
	vm.once.Do(func() { go vm.loop(vm.m.ctx) })
}

func (vm *volumeManager) loop(ctx context.Context) {
	t := vm.m.cfg.Clock.NewTimer(resyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case uid := <-vm.kicks:
			if w := vm.m.worker(uid); w != nil {
				vm.resync(ctx, w)
			}
		case <-t.C():
			vm.resyncAll(ctx)
			t.Reset(resyncPeriod)
		}
	}
}

func (vm *volumeManager) resyncAll(ctx context.Context) {
	vm.m.mu.Lock()
	workers := make([]*worker, 0, len(vm.m.workers))
	for _, w := range vm.m.workers {
		workers = append(workers, w)
	}
	vm.m.mu.Unlock()
	for _, w := range workers {
		vm.resync(ctx, w)
	}
	live := func(uid types.UID) bool { return vm.m.worker(uid) != nil }
	vm.watches.prune(live)
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

// resync rewrites the API-data volumes of a pod whose volumes are set up.
// It never creates a volume: a pod that finished meanwhile stays removed.
func (vm *volumeManager) resync(ctx context.Context, w *worker) {
	w.mu.Lock()
	pod, done := w.pod, w.finished || w.gone
	w.mu.Unlock()
	pv := vm.pod(w.uid)
	pv.mu.Lock()
	defer pv.mu.Unlock()
	if done || !pv.set {
		return
	}
	for _, v := range pod.Spec.Volumes {
		plugin := pluginDir(v)
		if plugin == "" || plugin == emptyDirPlugin {
			continue
		}
		dir := filepath.Join(w.podDir(), "volumes", plugin, v.Name)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		payload, err := vm.payload(ctx, pod, v)
		if err != nil {
			vm.m.cfg.Log.Info("volume not updated", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name, "err", err)
			continue
		}
		if changed, err := volume.Write(dir, payload, vm.m.cfg.Clock.Now()); err != nil {
			vm.m.cfg.Log.Warn("volume update failed", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name, "err", err)
		} else if changed {
			vm.m.cfg.Log.Info("volume updated", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name)
		}
	}
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

// setupVolumes makes every volume of the pod ready and returns the host
// directory (or file) of each by name. A volume that cannot be set up is a
// FailedMount event, as upstream, and a configError that holds the container
// back until the next retry (sooner when a watched object appears).
func (w *worker) setupVolumes(ctx context.Context, pod *v1.Pod) (map[string]string, error) {
	vm := w.m.volumes()
	vm.start()
	pv := vm.pod(pod.UID)
	pv.mu.Lock()
	defer pv.mu.Unlock()
	paths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		p, err := vm.setupVolume(ctx, w.podDir(), pod, v, pv)
		if err != nil {
			msg := claim.Event(v.Name, err)
			w.m.cfg.Log.Info("volume set-up failed", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "volume", v.Name, "err", err)
			w.m.cfg.Recorder.Event(pod, v1.EventTypeWarning, "FailedMount", msg)
			return nil, mountError{configError{Msg: msg}}
		}
		paths[v.Name] = p
	}
	pv.set = true
	return paths, nil
}

// mountError is a volume that could not be set up. Upstream keeps the
// container waiting as ContainerCreating with the FailedMount event (no
// Failed event); it unwraps to a configError, so that until the start path
// asks waitingReason it shows as CreateContainerConfigError.
type mountError struct{ configError }

func (e mountError) Unwrap() error { return e.configError }

// waitingReason is the waiting reason of a container whose creation failed
// with err, and whether the failure deserves a Failed event.
func waitingReason(err error) (reason string, failedEvent bool) {
	var me mountError
	var ce configError
	switch {
	case errors.As(err, &me):
		return "ContainerCreating", false
	case errors.As(err, &ce):
		return "CreateContainerConfigError", true
	}
	return "RunContainerError", true
}

func (vm *volumeManager) setupVolume(ctx context.Context, podDir string, pod *v1.Pod, v v1.Volume, pv *podVolumes) (string, error) {
	if v.HostPath != nil {
		return v.HostPath.Path, checkHostPath(v.HostPath)
	}
	if v.Image != nil {
		return "", nil // the runtime mounts the image; nothing on disk
	}
	if _, _, ok := claim.Name(pod, &v); ok {
		return vm.setupClaim(ctx, pod, v, pv)
	}
	plugin := pluginDir(v)
	if plugin == "" {
		return "", fmt.Errorf("volume %q: this kind of volume is not supported by the process runtime (supported: emptyDir, configMap, secret, downwardAPI, projected, hostPath, persistentVolumeClaim and ephemeral with hostPath or local PVs)", v.Name)
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
	changed, err := volume.Write(dir, payload, vm.m.cfg.Clock.Now())
	if err == nil && changed {
		err = applyFSGroup(dir, pod, true) // new files of a new payload too
	}
	return dir, err
}

// applyFSGroup gives a volume the pod's fsGroup (volume.SetOwnership); a
// pod without one leaves it as made. Volumes of objects (configMap, secret,
// downwardAPI, projected) are read-only for the group.
func applyFSGroup(dir string, pod *v1.Pod, readOnly bool) error {
	psc := pod.Spec.SecurityContext
	if psc == nil || psc.FSGroup == nil {
		return nil
	}
	if err := volume.SetOwnership(dir, *psc.FSGroup, readOnly, psc.FSGroupChangePolicy); err != nil {
		return fmt.Errorf("applying fsGroup %d: %w", *psc.FSGroup, err)
	}
	return nil
}
