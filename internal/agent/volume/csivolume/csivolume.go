// Package csivolume decides how the node mounts a CSI persistent volume
// into a pod, as the kubelet's CSI volume plugin: whether it must wait for
// the volume's VolumeAttachment, whether the node applies the pod's
// fsGroup, what the driver gets of the pod, the record the node keeps next
// to each published volume (so that it can be torn down after an agent
// restart) and when a staged volume is unstaged. It does no I/O; the
// volume manager does.
package csivolume

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
)

// UniqueName is the volume's name in the Node's status.volumesInUse and
// volumesAttached, as the CSI plugin names it: kubernetes.io/csi/<driver>^<handle>.
func UniqueName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName(noderequest.PluginDirName + "/" + driver + "^" + handle)
}

// AttachmentName is the name of the VolumeAttachment of a volume on a node,
// as the attach/detach controller names it: csi-<sha256(handle driver node)>.
func AttachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// AttachRequired: a driver without a CSIDriver object, or whose object does
// not say otherwise, needs its volumes attached (the API's default).
func AttachRequired(d *storagev1.CSIDriver) bool {
	return d == nil || d.Spec.AttachRequired == nil || *d.Spec.AttachRequired
}

// PodInfoOnMount: the driver wants the pod's name, namespace, UID and
// service account in NodePublishVolume's volume context.
func PodInfoOnMount(d *storagev1.CSIDriver) bool {
	return d != nil && d.Spec.PodInfoOnMount != nil && *d.Spec.PodInfoOnMount
}

// EphemeralAllowed: an inline CSI volume needs a CSIDriver object listing
// the Ephemeral lifecycle mode, as upstream checks.
func EphemeralAllowed(d *storagev1.CSIDriver, driver string) error {
	if d == nil {
		return fmt.Errorf("volume mode %q not supported by driver %s (no CSIDriver object)", storagev1.VolumeLifecycleEphemeral, driver)
	}
	modes := d.Spec.VolumeLifecycleModes
	if len(modes) == 0 {
		modes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	if !slices.Contains(modes, storagev1.VolumeLifecycleEphemeral) {
		return fmt.Errorf("volume mode %q not supported by driver %s (only supports %q)", storagev1.VolumeLifecycleEphemeral, driver, modes)
	}
	return nil
}

// TokensKey is the volume context (or secrets) key under which a driver
// with tokenRequests gets the pod's service account tokens.
const TokensKey = "csi.storage.k8s.io/serviceAccount.tokens"

// TokenAttrs are the pod's tokens for the driver, by audience, as the
// kubelet encodes them: {"<audience>": {"token": …, "expirationTimestamp": …}}.
func TokenAttrs(tokens map[string]authenticationv1.TokenRequestStatus) (map[string]string, error) {
	if len(tokens) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(tokens)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", TokensKey, err)
	}
	return map[string]string{TokensKey: string(b)}, nil
}

// TokensInSecrets: the driver wants the tokens with the secrets, not in
// the volume context.
func TokensInSecrets(d *storagev1.CSIDriver) bool {
	return d != nil && d.Spec.ServiceAccountTokenInSecrets != nil && *d.Spec.ServiceAccountTokenInSecrets
}

// fsGroupPolicy is the driver's policy; ReadWriteOnceWithFSType when unset.
func fsGroupPolicy(d *storagev1.CSIDriver) storagev1.FSGroupPolicy {
	if d == nil || d.Spec.FSGroupPolicy == nil {
		return storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy
	}
	return *d.Spec.FSGroupPolicy
}

// FSGroup is what becomes of the pod's fsGroup for a volume: toDriver is
// the group NodeStage/NodePublish pass on (the driver applies it: it has
// VOLUME_MOUNT_GROUP and the policy is File), byNode says the node changes
// the published volume's ownership itself. Upstream's rules: policy None
// never; File always; ReadWriteOnceWithFSType only for a volume with an
// fsType whose access mode is ReadWriteOnce. A read-only volume is never
// changed by the node.
func FSGroup(d *storagev1.CSIDriver, v noderequest.Volume, caps noderequest.Capabilities, fsGroup *int64) (toDriver *int64, byNode bool) {
	if fsGroup == nil {
		return nil, false
	}
	policy := fsGroupPolicy(d)
	if caps.VolumeMountGroup {
		if policy == storagev1.FileFSGroupPolicy {
			return fsGroup, false
		}
		return nil, false
	}
	if v.ReadOnly {
		return nil, false
	}
	switch policy {
	case storagev1.FileFSGroupPolicy:
		return nil, true
	case storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy:
		return nil, v.FSType != "" && v.AccessMode == v1.ReadWriteOnce
	}
	return nil, false
}

// DriverNotRegistered is the error of a volume whose driver has not
// registered on this node, in upstream's words.
func DriverNotRegistered(driver string) error {
	return fmt.Errorf("kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name %s not found in the list of registered CSI drivers", driver)
}

// Attached says whether a VolumeAttachment (nil: not found) lets the node
// mount the volume, and if not, why.
func Attached(va *storagev1.VolumeAttachment, name string) (metadata map[string]string, err error) {
	switch {
	case va == nil:
		return nil, fmt.Errorf("volume attachment %s is not found: waiting for the volume to be attached to this node", name)
	case va.DeletionTimestamp != nil:
		return nil, fmt.Errorf("volume attachment %s is being deleted", name)
	case va.Status.AttachError != nil && !va.Status.Attached:
		return nil, fmt.Errorf("volume attachment %s failed: %s", name, va.Status.AttachError.Message)
	case !va.Status.Attached:
		return nil, fmt.Errorf("volume attachment %s is not attached yet", name)
	}
	return va.Status.AttachmentMetadata, nil
}

// Record is what the node keeps of a published volume, in vol_data.json
// next to its mount directory as the kubelet does: enough to unpublish and
// unstage it without the PV (gone, or an agent that restarted).
type Record struct {
	SpecVolID    string `json:"specVolID"`
	VolumeHandle string `json:"volumeHandle"`
	DriverName   string `json:"driverName"`
	NodeName     string `json:"nodeName"`
	AttachmentID string `json:"attachmentID,omitempty"`
	// Staged: the driver staged the volume (STAGE_UNSTAGE_VOLUME), so it
	// is unstaged once no pod publishes it.
	Staged bool `json:"staged,omitempty"`
	// VolumeLifecycleMode is Persistent (a PV) or Ephemeral (an inline
	// volume, which is neither attached nor staged).
	VolumeLifecycleMode storagev1.VolumeLifecycleMode `json:"volumeLifecycleMode,omitempty"`
	// PodVolume is the name of the pod's volume (the PV is SpecVolID), for
	// the volume's stats; podvisor's own, absent from older records.
	PodVolume string `json:"podVolume,omitempty"`
	// Size is the PV's capacity when this node published the volume, or
	// the size it last grew it to (NodeExpandVolume): a volume grown on
	// another node (ReadWriteMany) is grown here when the PV is larger.
	// podvisor's own (the kubelet keeps it in memory); absent: unknown.
	Size string `json:"size,omitempty"`
}

// Encode and Decode the record file.
func (r Record) Encode() ([]byte, error) { return json.Marshal(r) }

func Decode(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("%s: %w", noderequest.RecordFileName, err)
	}
	if r.DriverName == "" || r.VolumeHandle == "" || r.SpecVolID == "" {
		return Record{}, fmt.Errorf("%s lacks the driver, handle or volume name", noderequest.RecordFileName)
	}
	return r, nil
}

// Volume is the part of a noderequest.Volume a record gives back, enough
// for NodeUnpublishVolume and NodeUnstageVolume.
func (r Record) Volume() noderequest.Volume {
	return noderequest.Volume{SpecName: r.SpecVolID, Driver: r.DriverName, Handle: r.VolumeHandle}
}

// Unstage says whether a staged volume is unstaged once r is unpublished:
// when no other record (the published volumes of the node's other pods)
// names the same driver and handle.
func Unstage(r Record, others []Record) bool {
	if !r.Staged {
		return false
	}
	for _, o := range others {
		if o.DriverName == r.DriverName && o.VolumeHandle == r.VolumeHandle {
			return false
		}
	}
	return true
}
