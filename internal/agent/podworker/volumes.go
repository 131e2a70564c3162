package podworker

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/podvisor/podvisor/internal/agent/volume"
	"github.com/podvisor/podvisor/internal/runtime"
)

// Volumes is the volume manager as the workers use it (volume.Manager):
// a pod's volumes are set up before each container start, the mounts of
// the container follow from them, and they are torn down when the pod
// finishes.
type Volumes interface {
	Start(ctx context.Context)
	SetUp(ctx context.Context, pod *v1.Pod, podDir string) (volume.Paths, error)
	EnsureImages(ctx context.Context, pod *v1.Pod, c *v1.Container) (imageIDs map[string]string, err error)
	Mounts(pod *v1.Pod, c *v1.Container, paths volume.Paths, imageIDs, env map[string]string, rt volume.Runtime) ([]runtime.Mount, error)
	// Refresh rewrites the pod's API-data volumes now: an object changed.
	Refresh(uid types.UID)
	// Unmount unpublishes (and unstages) the pod's CSI volumes once it
	// has terminated; the final delete waits for it to succeed.
	Unmount(ctx context.Context, podDir string) error
	// TearDown empties the pod's directory of mounts and reports whether
	// it may be removed (not while a CSI volume could not be unpublished).
	TearDown(podDir string) bool
	// CSIVolumeStats are the usage of the pod's CSI volumes as their
	// drivers report it, for the summary API.
	CSIVolumeStats(ctx context.Context, pod *v1.Pod, podDir string) []statsapi.VolumeStats
}

var _ Volumes = (*volume.Manager)(nil)

// VolumeStats are the usage of the pod's volumes that the volume manager
// measures beyond the eviction manager's emptyDirs: CSI volumes whose
// drivers report it.
func (m *Manager) VolumeStats(ctx context.Context, pod *v1.Pod) []statsapi.VolumeStats {
	return m.vols.CSIVolumeStats(ctx, pod, m.PodDir(pod))
}

// newVolumes makes the volume manager of m, which reads the pods' objects
// through m (watching them) and knows the pods from m's workers.
func newVolumes(m *Manager) (*volume.Manager, error) {
	cfg := volume.Config{
		NodeName: m.cfg.NodeName, HostIP: m.cfg.HostIP, PodsDir: m.cfg.PodsDir,
		Allocatable: m.cfg.Allocatable, Node: m.cfg.Node, Client: m.cfg.Client,
		Objects: podObjectReader{m}, Pods: podView{m},
		PullSecrets: m.pullSecrets, CatchUp: m.untilCaughtUp, CSI: m.cfg.CSI, CSIRoot: m.cfg.CSIRoot,
		Recorder: m.cfg.Recorder, Clock: m.cfg.Clock, Log: m.cfg.Log,
	}
	if m.images != nil {
		cfg.Images = m.images
	}
	return volume.New(cfg)
}

// podObjectReader reads a pod's ConfigMaps and Secrets through the manager,
// which watches them for the pod.
type podObjectReader struct{ m *Manager }

func (o podObjectReader) ConfigMap(ctx context.Context, uid types.UID, ns, name string) (*v1.ConfigMap, error) {
	return o.m.getConfigMap(ctx, uid, ns, name)
}

func (o podObjectReader) Secret(ctx context.Context, uid types.UID, ns, name string) (*v1.Secret, error) {
	return o.m.getSecret(ctx, uid, ns, name)
}

// podView is the workers' pods as the volume manager sees them.
type podView struct{ m *Manager }

func (p podView) Pod(uid types.UID) (*v1.Pod, bool) {
	w := p.m.worker(uid)
	if w == nil {
		return nil, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, !w.finished && !w.gone
}

func (p podView) Dirs() map[string]bool { return p.m.knownPodDirs() }

// waitingReason is the waiting reason of a container whose creation failed
// with err, and whether the failure deserves a Failed event.
func waitingReason(err error) (reason string, failedEvent bool) {
	var me volume.MountError
	var ce configError
	switch {
	case errors.As(err, &me):
		return "ContainerCreating", false
	case errors.As(err, &ce):
		return "CreateContainerConfigError", true
	}
	return "RunContainerError", true
}
