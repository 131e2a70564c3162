package volume

import (
	"context"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/agent/volume/claim"
)

// Persistent volumes: a persistentVolumeClaim or generic ephemeral volume
// mounts its bound PV's directory on this node (claim.Resolve decides);
// containers get it as a bind mount, as a hostPath. Until the claim is
// bound (or its PV can be mounted here) the pod waits with FailedMount and
// the start is retried.

// setupClaim resolves the claim of volume v and makes its directory ready.
// A writable local PV gets the pod's fsGroup the first time, as the
// kubelet's local volume plugin does when it mounts it (hostPath PVs do
// not, as upstream's hostPath plugin).
func (vm *Manager) setupClaim(ctx context.Context, pod *v1.Pod, v v1.Volume, pvs *podVolumes) (string, error) {
	name, _, _ := claim.Name(pod, &v)
	client := vm.cfg.Client
	if client == nil {
		return "", &claim.Error{Msg: "persistent volumes need the API server"}
	}
	var pv *v1.PersistentVolume
	var pvErr error
	pvc, pvcErr := client.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if pvcErr != nil {
		pvc = nil
	} else if pvc.Spec.VolumeName != "" {
		if pv, pvErr = client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{}); pvErr != nil {
			pv = nil
		}
	}
	var labels map[string]string
	if vm.cfg.Node != nil {
		if n, err := vm.cfg.Node(); err == nil && n != nil {
			labels = n.Labels
		}
	}
	if labels == nil { // the Node not known yet: its name is its hostname label
		labels = map[string]string{v1.LabelHostname: vm.cfg.NodeName}
	}
	m, err := claim.Resolve(pod, &v, pvc, pvcErr, pv, pvErr, labels)
	if err != nil {
		return "", err
	}
	switch m.Kind {
	case claim.KindCSI:
		path, err := vm.setupCSI(ctx, pod, v, pv, m.ReadOnly, pvs)
		if err == nil {
			// A claim expanded while no pod used it grows now (upstream
			// expands at mount too).
			vm.expandClaim(ctx, pod, v, pvc, pv, pvs)
		}
		return path, err
	case claim.KindNFS:
		return vm.setupNFS(ctx, pvs.dir, m)
	case claim.KindHostPath:
		if err := checkHostPath(&v1.HostPathVolumeSource{Path: m.Path, Type: m.HostPathType}); err != nil {
			return "", err
		}
	case claim.KindLocal:
		if _, err := os.Stat(m.Path); err != nil {
			return "", fmt.Errorf("local volume %s: path %q does not exist on this node", m.PV, m.Path)
		}
		if !m.ReadOnly && !pvs.owned[v.Name] {
			if err := applyFSGroup(m.Path, pod, false); err != nil {
				return "", err
			}
			if pvs.owned == nil {
				pvs.owned = map[string]bool{}
			}
			pvs.owned[v.Name] = true
		}
	}
	return m.Path, nil
}
