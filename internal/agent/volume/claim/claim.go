// Package claim resolves a pod's persistentVolumeClaim and generic
// ephemeral volumes to what the node mounts: the bound PersistentVolume's
// directory on this node. It decides only; the caller fetches the objects
// and mounts. The checks and their messages follow the kubelet's
// desired-state populator (PVC bound, PV bound back to it) and its
// operation generator (a local volume's node affinity).
package claim

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/storage/ephemeral"
	volumehelpers "k8s.io/component-helpers/storage/volume"
)

// Name is the PVC a volume mounts and whether the volume asks for it
// read-only; ok is false for a volume of another kind. A generic
// ephemeral volume's claim is <pod>-<volume>, made by the controller
// manager's ephemeral-volume controller.
func Name(pod *v1.Pod, v *v1.Volume) (name string, readOnly, ok bool) {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName, v.PersistentVolumeClaim.ReadOnly, true
	case v.Ephemeral != nil:
		return ephemeral.VolumeClaimName(pod, v), false, true
	}
	return "", false, false
}

// Kind is how a PV is mounted on this node.
type Kind string

const (
	KindHostPath Kind = "hostPath"
	KindLocal    Kind = "local"
	// KindCSI: the PV's CSI driver publishes it into the pod's directory;
	// Path is empty (the volume manager knows where).
	KindCSI Kind = "csi"
	// KindNFS: the host's NFS client mounts NFSSource in the pod's
	// directory; Path is empty (the volume manager knows where).
	KindNFS Kind = "nfs"
)

// Mount is a resolved claim: the PV's path on this node, mounted as a bind
// mount into the containers that name the volume.
type Mount struct {
	PV       string
	Kind     Kind
	Path     string
	ReadOnly bool
	// HostPathType is the hostPath PV's type, checked (and for the
	// *OrCreate types acted on) by the caller as for a hostPath volume.
	HostPathType *v1.HostPathType
	// NFSSource (server:export) and MountOptions (the PV's) of an nfs PV.
	NFSSource    string
	MountOptions []string
}

// Error is a claim that cannot be mounted (yet). ProcessingFailed errors
// are the kubelet's "failed to process volumes" kind (the PVC or PV is not
// ready: retried until it is); the others are the mount's own failure.
type Error struct {
	ProcessingFailed bool
	Msg              string
}

func (e *Error) Error() string { return e.Msg }

// Message is an error whose text is the whole event message (the CSI
// operations name their step and the PV themselves, as upstream).
type Message struct{ Msg string }

func (e *Message) Error() string { return e.Msg }

// Event is the FailedMount event's message for err of volume, as the
// kubelet words it: the volume's name in the lists of what is not mounted,
// and then what is wrong with it (which upstream leaves to its log).
func Event(volume string, err error) string {
	var m *Message
	if errors.As(err, &m) {
		return m.Msg
	}
	var ce *Error
	if errors.As(err, &ce) && ce.ProcessingFailed {
		return fmt.Sprintf("Unable to attach or mount volumes: unmounted volumes=[%s], unattached volumes=[], failed to process volumes=[%s]: %s", volume, volume, ce.Msg)
	}
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", volume, err)
}

func processing(pod *v1.Pod, claim, format string, a ...any) *Error {
	return &Error{ProcessingFailed: true, Msg: fmt.Sprintf("error processing PVC %s/%s: %s", pod.Namespace, claim, fmt.Sprintf(format, a...))}
}

// Resolve decides what volume v of pod mounts, given its PVC and the PV the
// PVC names (nil when not found: pvcErr/pvErr say why) and the node's
// labels (for a local volume's node affinity).
func Resolve(pod *v1.Pod, v *v1.Volume, pvc *v1.PersistentVolumeClaim, pvcErr error, pv *v1.PersistentVolume, pvErr error, nodeLabels map[string]string) (Mount, error) {
	name, readOnly, ok := Name(pod, v)
	if !ok {
		return Mount{}, fmt.Errorf("volume %q is not a persistentVolumeClaim or ephemeral volume", v.Name)
	}
	if pvc == nil {
		return Mount{}, processing(pod, name, "failed to fetch PVC from API server: %v", pvcErr)
	}
	if v.Ephemeral != nil {
		if err := ephemeral.VolumeIsForPod(pod, pvc); err != nil {
			return Mount{}, processing(pod, name, "%v", err)
		}
	}
	switch {
	case pvc.DeletionTimestamp != nil:
		return Mount{}, processing(pod, name, "PVC is being deleted")
	case pvc.Status.Phase != v1.ClaimBound:
		return Mount{}, processing(pod, name, "PVC is not bound")
	case pvc.Spec.VolumeName == "":
		return Mount{}, processing(pod, name, "PVC has empty pvc.Spec.VolumeName")
	}
	if pv == nil {
		return Mount{}, processing(pod, name, "failed to fetch PV %s from API server: %v", pvc.Spec.VolumeName, pvErr)
	}
	switch {
	case pv.Spec.ClaimRef == nil:
		return Mount{}, processing(pod, name, "found PV object %s but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim", pv.Name)
	case pv.Spec.ClaimRef.UID != pvc.UID:
		return Mount{}, processing(pod, name, "found PV object %s but its pv.Spec.ClaimRef.UID %s does not point to claim.UID %s", pv.Name, pv.Spec.ClaimRef.UID, pvc.UID)
	}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock {
		return Mount{}, &Error{Msg: fmt.Sprintf("PV %s has volumeMode Block, which this node does not support yet (only Filesystem)", pv.Name)}
	}
	m := Mount{PV: pv.Name, ReadOnly: readOnly}
	switch {
	case pv.Spec.HostPath != nil:
		m.Kind, m.Path, m.HostPathType = KindHostPath, pv.Spec.HostPath.Path, pv.Spec.HostPath.Type
	case pv.Spec.Local != nil:
		if err := volumehelpers.CheckNodeAffinity(pv, nodeLabels); err != nil {
			return Mount{}, &Error{Msg: fmt.Sprintf("MountVolume.NodeAffinity check failed for volume %q : %v", pv.Name, err)}
		}
		m.Kind, m.Path = KindLocal, pv.Spec.Local.Path
	case pv.Spec.CSI != nil:
		m.Kind = KindCSI
	case pv.Spec.NFS != nil:
		m.Kind, m.NFSSource, m.MountOptions = KindNFS, nfsSource(pv.Spec.NFS), pv.Spec.MountOptions
		m.ReadOnly = m.ReadOnly || pv.Spec.NFS.ReadOnly
	default:
		return Mount{}, processing(pod, name, "PV %s is of type %s, which this node cannot mount yet (supported: hostPath, local, csi, nfs)", pv.Name, sourceType(pv))
	}
	return m, nil
}

// nfsSource is the NFS export as mount.nfs takes it: server:path, an IPv6
// server in brackets, as upstream's nfs plugin.
func nfsSource(n *v1.NFSVolumeSource) string {
	if ip, err := netip.ParseAddr(n.Server); err == nil && ip.Is6() {
		return "[" + n.Server + "]:" + n.Path
	}
	return n.Server + ":" + n.Path
}

// NFSMountArgs are mount(8)'s arguments for an nfs Mount at target: ro for
// a read-only volume first, then the PV's mountOptions.
func NFSMountArgs(m Mount, target string) []string {
	opts := slices.Clone(m.MountOptions)
	if m.ReadOnly {
		opts = append([]string{"ro"}, opts...)
	}
	args := []string{"-t", "nfs"}
	if len(opts) > 0 {
		args = append(args, "-o", strings.Join(opts, ","))
	}
	return append(args, m.NFSSource, target)
}

// sourceType names the volume source a PV has, as its field in the API.
func sourceType(pv *v1.PersistentVolume) string {
	s := pv.Spec.PersistentVolumeSource
	var set []string
	for name, present := range map[string]bool{
		"csi": s.CSI != nil, "nfs": s.NFS != nil, "iscsi": s.ISCSI != nil, "fc": s.FC != nil,
		"rbd": s.RBD != nil, "cephfs": s.CephFS != nil, "glusterfs": s.Glusterfs != nil,
		"awsElasticBlockStore": s.AWSElasticBlockStore != nil, "gcePersistentDisk": s.GCEPersistentDisk != nil,
		"azureDisk": s.AzureDisk != nil, "azureFile": s.AzureFile != nil, "cinder": s.Cinder != nil,
		"vsphereVolume": s.VsphereVolume != nil, "flexVolume": s.FlexVolume != nil, "portworxVolume": s.PortworxVolume != nil,
	} {
		if present {
			set = append(set, name)
		}
	}
	if len(set) == 0 {
		return "unknown"
	}
	sort.Strings(set)
	return strings.Join(set, ",")
}
