package volume

import (
	"context"
	"errors"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/agent/csi/nodeclient"
	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
	"github.com/podvisor/podvisor/internal/agent/volume/claim"
	"github.com/podvisor/podvisor/internal/agent/volume/csivolume"
	"github.com/podvisor/podvisor/internal/agent/volume/nodeexpand"
)

// Volume expansion, the node's part: once the resize controller (the
// external-resizer for CSI) has grown a claim's volume and left the claim
// NodeResizePending, the node calls NodeExpandVolume on the driver for
// each pod that publishes it and writes the claim's status as the kubelet
// does (nodeexpand decides). It looks when a pod's volumes are set up
// (before each container start) and at every resync of a running pod
// (each resyncPeriod, or at once when the pod changes), as the kubelet
// looks at its pod syncs. A mount older than a claim another expansion
// finished (a ReadWriteMany volume grown by another node) is grown too,
// from the size kept in the volume's record. hostPath, local and
// local-path volumes have nothing to grow on the node.

// expandPublished looks at the sizes of the pod's CSI claim volumes that
// are published into it; called with the pod's podVolumes held.
func (vm *Manager) expandPublished(ctx context.Context, pod *v1.Pod, pvs *podVolumes) {
	api := vm.cfg.Client
	if api == nil || len(pvs.published) == 0 {
		return
	}
	for _, v := range pod.Spec.Volumes {
		name, _, ok := claim.Name(pod, &v)
		if !ok || !pvs.published[v.Name] {
			continue
		}
		pvc, err := api.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || pvc.Spec.VolumeName == "" {
			continue
		}
		pv, err := api.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		vm.expandClaim(ctx, pod, v, pvc, pv, pvs)
	}
}

// expandClaim grows the filesystem of the claim's CSI volume, published
// into the pod as v, if nodeexpand says so; called with pvs held. Failures
// are events and logs; the next look tries again (unless the driver said
// the size is infeasible, or that it cannot grow the volume in use), as
// the kubelet retries.
func (vm *Manager) expandClaim(ctx context.Context, pod *v1.Pod, v v1.Volume, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, pvs *podVolumes) {
	if pvs.expandInUse[v.Name] {
		return
	}
	podDir := pvs.dir
	readOnly := v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ReadOnly
	rec, _ := readRecord(podDir, pv.Name)
	mounted, _ := resource.ParseQuantity(rec.Size) // "" or bad: zero, unknown
	d := nodeexpand.Decide(pvc, pv, readOnly, mounted)
	if d.Action != nodeexpand.Expand {
		return
	}
	log := vm.cfg.Log.With("pod", pod.Namespace+"/"+pod.Name, "volume", v.Name, "pv", pv.Name, "size", d.NewSize.String())
	err := vm.nodeExpand(ctx, pod, pvc, pv, podDir, d)
	if err == nil {
		return
	}
	log.Warn("NodeExpandVolume failed", "err", err, "claimDone", d.ClaimDone)
	vm.cfg.Recorder.Event(pod, v1.EventTypeWarning, nodeexpand.ReasonFailed, nodeexpand.FailedMessage(pv.Name, err))
	if nodeexpand.InUse(err) {
		log.Info("the driver cannot grow the volume while it is in use: not tried again while this pod mounts it")
		if pvs.expandInUse == nil {
			pvs.expandInUse = map[string]bool{}
		}
		pvs.expandInUse[v.Name] = true
	}
	var nf notFinal
	if errors.As(err, &nf) || d.ClaimDone {
		// A claim another expansion finished is not marked failed for
		// this node's mount; the next look tries again.
		return
	}
	failed := nodeexpand.Failed(pvc, err, nodeexpand.Infeasible(err), metav1.NewTime(vm.cfg.Clock.Now()))
	if _, err := vm.cfg.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, failed, metav1.UpdateOptions{}); err != nil {
		log.Warn("writing the claim's NodeResizeError", "err", err)
	}
}

// notFinal is a failure that leaves the claim's status as it is: the
// expansion may still be under way in the driver, or never reached it.
type notFinal struct{ error }

func (e notFinal) Unwrap() error { return e.error }

// nodeExpand marks the claim, calls NodeExpandVolume and marks the claim
// finished; pvc is updated in place of each status written.
func (vm *Manager) nodeExpand(ctx context.Context, pod *v1.Pod, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, podDir string, d nodeexpand.Decision) error {
	vol, err := noderequest.FromPV(pv, false)
	if err != nil {
		return err
	}
	if vm.cfg.CSI == nil {
		return notFinal{csivolume.DriverNotRegistered(vol.Driver)}
	}
	_, client, ok := vm.cfg.CSI.Get(vol.Driver)
	if !ok {
		return notFinal{csivolume.DriverNotRegistered(vol.Driver)}
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	caps, err := client.Capabilities(ctx)
	if err != nil {
		return notFinal{err}
	}
	if !caps.ExpandVolume {
		if d.ClaimDone {
			// Nothing of the node's to grow: the controller's expansion
			// was the whole of it. The record catches up.
			return vm.recordSize(podDir, vol.SpecName, d.NewSize)
		}
		return fmt.Errorf("Expander.NodeExpand failed to expand the volume : NodeExpand is not supported by the CSI driver %s", vol.Driver)
	}
	secrets, err := vm.csiSecrets(ctx, vol.ExpandSecretRef)
	if err != nil {
		return notFinal{err}
	}
	api := vm.cfg.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace)
	if d.MarkInProgress {
		if pvc, err = api.UpdateStatus(ctx, nodeexpand.InProgress(pvc), metav1.UpdateOptions{}); err != nil {
			return notFinal{fmt.Errorf("MountVolume.NodeExpandVolume failed to mark node expansion in progress: %w", err)}
		}
	}
	unlock := vm.csiLocks.lock(vol.Driver, vol.Handle)
	defer unlock()
	rec, _ := readRecord(podDir, vol.SpecName)
	req := noderequest.ExpandRequest(vm.cfg.CSIRoot, vol, podDir, rec.Staged, caps, d.NewSize.Value(), secrets)
	if _, err := client.Expand(ctx, req); err != nil {
		if !nodeclient.Final(err) {
			return notFinal{err}
		}
		return fmt.Errorf("Expander.NodeExpand failed to expand the volume : %w", err)
	}
	if err := vm.recordSize(podDir, vol.SpecName, d.NewSize); err != nil {
		// The next look grows the mount again (idempotent) and retries.
		return notFinal{err}
	}
	if d.ClaimDone {
		vm.cfg.Log.Info("volume expanded on the node, its claim already expanded", "pod", pod.Namespace+"/"+pod.Name, "pv", pv.Name, "size", d.NewSize.String())
		return nil
	}
	msg := nodeexpand.SucceededMessage(pv.Name, vm.cfg.NodeName)
	vm.cfg.Recorder.Event(pod, v1.EventTypeNormal, nodeexpand.ReasonSucceeded, msg)
	vm.cfg.Recorder.Event(pvc, v1.EventTypeNormal, nodeexpand.ReasonSucceeded, msg)
	vm.cfg.Log.Info("volume expanded on the node", "pod", pod.Namespace+"/"+pod.Name, "pv", pv.Name, "size", d.NewSize.String())
	if _, err := api.UpdateStatus(ctx, nodeexpand.Finished(pvc, d.NewSize), metav1.UpdateOptions{}); err != nil {
		// NodeExpandVolume is idempotent: the next look calls it again
		// and writes the status then.
		return notFinal{fmt.Errorf("mountVolume.NodeExpandVolume update pvc status failed: %w", err)}
	}
	return nil
}

// readRecord reads the record of the CSI volume specName published into
// the pod whose directory is podDir.
func readRecord(podDir, specName string) (csivolume.Record, error) {
	b, err := os.ReadFile(noderequest.RecordPath(podDir, specName))
	if err != nil {
		return csivolume.Record{}, err
	}
	return csivolume.Decode(b)
}

// recordSize keeps in the volume's record the size the node's mount now
// has.
func (vm *Manager) recordSize(podDir, specName string, size resource.Quantity) error {
	rec, err := readRecord(podDir, specName)
	if err != nil {
		return fmt.Errorf("reading the record of volume %s: %w", specName, err)
	}
	rec.Size = size.String()
	return writeRecord(podDir, rec)
}
