package noderequest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "k8s.io/api/core/v1"
)

// fsTypeBlock is the fsType the kubelet passes for a volumeMode: Block
// volume; it asks the driver for a block capability instead of a mount.
const fsTypeBlock = "block"

// Capabilities are the node service capabilities of a driver that change
// what the node sends it (NodeGetCapabilities).
type Capabilities struct {
	StageUnstage          bool // NodeStageVolume before NodePublishVolume
	SingleNodeMultiWriter bool // the CSI 1.5 single-node access modes
	VolumeMountGroup      bool // the driver applies fsGroup itself
	GetVolumeStats        bool
	ExpandVolume          bool
}

// Volume is what the node needs of a CSI persistent volume, read from its
// PV by FromPV.
type Volume struct {
	SpecName      string // the PV's name, the publish directory's name
	Driver        string
	Handle        string
	FSType        string
	Block         bool
	ReadOnly      bool
	AccessMode    v1.PersistentVolumeAccessMode
	MountOptions  []string
	VolumeContext map[string]string
	// The secrets the driver wants for each call; the caller reads them.
	StageSecretRef   *v1.SecretReference
	PublishSecretRef *v1.SecretReference
	ExpandSecretRef  *v1.SecretReference
}

// FromPV reads a CSI PV. podReadOnly is the pod volume's
// persistentVolumeClaim.readOnly; the volume is read-only if either it or
// the PV's csi.readOnly says so, as upstream.
func FromPV(pv *v1.PersistentVolume, podReadOnly bool) (Volume, error) {
	if pv == nil || pv.Spec.CSI == nil {
		return Volume{}, errors.New("persistent volume is not a CSI volume")
	}
	src := pv.Spec.CSI
	if src.Driver == "" {
		return Volume{}, fmt.Errorf("persistent volume %s: csi.driver is empty", pv.Name)
	}
	if src.VolumeHandle == "" {
		return Volume{}, fmt.Errorf("persistent volume %s: csi.volumeHandle is empty", pv.Name)
	}
	// The kubelet uses the PV's first access mode, and ReadWriteOnce when
	// there is none.
	mode := v1.ReadWriteOnce
	if len(pv.Spec.AccessModes) > 0 {
		mode = pv.Spec.AccessModes[0]
	}
	return Volume{
		SpecName:         pv.Name,
		Driver:           src.Driver,
		Handle:           src.VolumeHandle,
		FSType:           src.FSType,
		Block:            pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock,
		ReadOnly:         src.ReadOnly || podReadOnly,
		AccessMode:       mode,
		MountOptions:     pv.Spec.MountOptions,
		VolumeContext:    src.VolumeAttributes,
		StageSecretRef:   src.NodeStageSecretRef,
		PublishSecretRef: src.NodePublishSecretRef,
		ExpandSecretRef:  src.NodeExpandSecretRef,
	}, nil
}

// InlineHandle is the volume ID of a pod's inline CSI volume, as the
// kubelet makes it: csi-<sha256(pod UID, volume name)>, the same for every
// call on the pod's volume and unique on the node.
func InlineHandle(podUID, volumeName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(podUID+volumeName)))
}

// FromInline reads a pod's inline (ephemeral) CSI volume: published into
// the pod under the volume's name, never staged, read-write once unless it
// says readOnly; its publish secret is in the pod's namespace.
func FromInline(podUID, namespace string, v *v1.Volume) (Volume, error) {
	if v == nil || v.CSI == nil {
		return Volume{}, errors.New("volume is not an inline CSI volume")
	}
	src := v.CSI
	if src.Driver == "" {
		return Volume{}, fmt.Errorf("volume %s: csi.driver is empty", v.Name)
	}
	out := Volume{
		SpecName:      v.Name,
		Driver:        src.Driver,
		Handle:        InlineHandle(podUID, v.Name),
		ReadOnly:      src.ReadOnly != nil && *src.ReadOnly,
		AccessMode:    v1.ReadWriteOnce,
		VolumeContext: src.VolumeAttributes,
	}
	if src.FSType != nil {
		out.FSType = *src.FSType
	}
	if src.NodePublishSecretRef != nil {
		out.PublishSecretRef = &v1.SecretReference{Name: src.NodePublishSecretRef.Name, Namespace: namespace}
	}
	return out, nil
}

// AccessMode maps a Kubernetes access mode to CSI's. Drivers with the
// SINGLE_NODE_MULTI_WRITER capability get the CSI 1.5 single-node modes;
// the others get SINGLE_NODE_WRITER for ReadWriteOncePod too, as upstream,
// so that such drivers still serve ReadWriteOncePod claims.
func AccessMode(m v1.PersistentVolumeAccessMode, caps Capabilities) csi.VolumeCapability_AccessMode_Mode {
	switch m {
	case v1.ReadOnlyMany:
		return csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	case v1.ReadWriteMany:
		return csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	case v1.ReadWriteOnce:
		if caps.SingleNodeMultiWriter {
			return csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
		}
		return csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	case v1.ReadWriteOncePod:
		if caps.SingleNodeMultiWriter {
			return csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
		return csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	}
	return csi.VolumeCapability_AccessMode_UNKNOWN
}

// capability is the VolumeCapability of a volume: block, or a mount with
// its fsType, mount options and (when the driver applies it) fsGroup.
func capability(v Volume, caps Capabilities, fsGroup *int64) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: AccessMode(v.AccessMode, caps)}}
	if v.Block || v.FSType == fsTypeBlock {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		return c
	}
	m := &csi.VolumeCapability_MountVolume{FsType: v.FSType, MountFlags: v.MountOptions}
	if fsGroup != nil && caps.VolumeMountGroup {
		m.VolumeMountGroup = strconv.FormatInt(*fsGroup, 10)
	}
	c.AccessType = &csi.VolumeCapability_Mount{Mount: m}
	return c
}

// StageRequest is the NodeStageVolume request for a volume, or nil when the
// driver does not stage (no STAGE_UNSTAGE_VOLUME): then the node goes
// straight to NodePublishVolume. publishContext is the VolumeAttachment's
// status.attachmentMetadata (nil for drivers that need no attach).
func StageRequest(root string, v Volume, caps Capabilities, publishContext, secrets map[string]string, fsGroup *int64) *csi.NodeStageVolumeRequest {
	if !caps.StageUnstage {
		return nil
	}
	return &csi.NodeStageVolumeRequest{
		VolumeId:          v.Handle,
		PublishContext:    publishContext,
		StagingTargetPath: StagingPath(root, v.Driver, v.Handle),
		VolumeCapability:  capability(v, caps, fsGroup),
		Secrets:           secrets,
		VolumeContext:     v.VolumeContext,
	}
}

// UnstageRequest undoes StageRequest; nil when the driver does not stage.
func UnstageRequest(root string, v Volume, caps Capabilities) *csi.NodeUnstageVolumeRequest {
	if !caps.StageUnstage {
		return nil
	}
	return &csi.NodeUnstageVolumeRequest{VolumeId: v.Handle, StagingTargetPath: StagingPath(root, v.Driver, v.Handle)}
}

// Pod is what NodePublishVolume may tell the driver about the pod.
type Pod struct {
	Name, Namespace, UID, ServiceAccountName string
	Dir                                      string // the pod's directory on this node
}

// PublishOptions are the per-call inputs that do not come from the PV.
type PublishOptions struct {
	PublishContext map[string]string // the VolumeAttachment's attachmentMetadata
	Secrets        map[string]string // read from PublishSecretRef
	FSGroup        *int64
	// PodInfoOnMount is the CSIDriver's spec.podInfoOnMount.
	PodInfoOnMount bool
	// TokenAttrs are csi.storage.k8s.io/serviceAccount.tokens for drivers
	// with tokenRequests; TokensInSecrets is the CSIDriver's
	// serviceAccountTokenInSecrets (then they go with the secrets).
	TokenAttrs      map[string]string
	TokensInSecrets bool
	// Ephemeral: an inline volume of the pod (FromInline), as the pod
	// info's csi.storage.k8s.io/ephemeral says.
	Ephemeral bool
}

// PodInfo is the volume context the kubelet adds for drivers with
// podInfoOnMount.
func PodInfo(p Pod, ephemeral bool) map[string]string {
	return map[string]string{
		"csi.storage.k8s.io/pod.name":            p.Name,
		"csi.storage.k8s.io/pod.namespace":       p.Namespace,
		"csi.storage.k8s.io/pod.uid":             p.UID,
		"csi.storage.k8s.io/serviceAccount.name": p.ServiceAccountName,
		"csi.storage.k8s.io/ephemeral":           strconv.FormatBool(ephemeral),
	}
}

// PublishRequest is the NodePublishVolume request publishing a PV into a
// pod. The staging path is set only for drivers that stage.
func PublishRequest(root string, v Volume, p Pod, caps Capabilities, o PublishOptions) *csi.NodePublishVolumeRequest {
	volCtx := maps.Clone(v.VolumeContext)
	secrets := maps.Clone(o.Secrets)
	if o.PodInfoOnMount {
		volCtx = merge(volCtx, PodInfo(p, o.Ephemeral))
	}
	if o.TokensInSecrets {
		secrets = merge(secrets, o.TokenAttrs)
	} else {
		volCtx = merge(volCtx, o.TokenAttrs)
	}
	if secrets == nil {
		// Upstream always sends a (possibly empty) secrets map.
		secrets = map[string]string{}
	}
	req := &csi.NodePublishVolumeRequest{
		VolumeId:         v.Handle,
		PublishContext:   o.PublishContext,
		TargetPath:       PublishPath(p.Dir, v.SpecName),
		VolumeCapability: capability(v, caps, o.FSGroup),
		Readonly:         v.ReadOnly,
		Secrets:          secrets,
		VolumeContext:    volCtx,
	}
	if caps.StageUnstage {
		req.StagingTargetPath = StagingPath(root, v.Driver, v.Handle)
	}
	return req
}

// UnpublishRequest undoes PublishRequest.
func UnpublishRequest(v Volume, podDir string) *csi.NodeUnpublishVolumeRequest {
	return &csi.NodeUnpublishVolumeRequest{VolumeId: v.Handle, TargetPath: PublishPath(podDir, v.SpecName)}
}

// merge adds extra to base (extra wins), allocating base if needed.
func merge(base, extra map[string]string) map[string]string {
	if len(extra) == 0 {
		return base
	}
	if base == nil {
		base = make(map[string]string, len(extra))
	}
	maps.Copy(base, extra)
	return base
}

// CapabilitiesFrom reads a NodeGetCapabilities response.
func CapabilitiesFrom(resp *csi.NodeGetCapabilitiesResponse) Capabilities {
	var c Capabilities
	for _, cap := range resp.GetCapabilities() {
		switch cap.GetRpc().GetType() {
		case csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			c.StageUnstage = true
		case csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER:
			c.SingleNodeMultiWriter = true
		case csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP:
			c.VolumeMountGroup = true
		case csi.NodeServiceCapability_RPC_GET_VOLUME_STATS:
			c.GetVolumeStats = true
		case csi.NodeServiceCapability_RPC_EXPAND_VOLUME:
			c.ExpandVolume = true
		}
	}
	return c
}

// VolumeStatsRequest asks for the usage of v as published into the pod
// whose directory is podDir; the staging path too where the volume was
// staged, as upstream sends it.
func VolumeStatsRequest(root string, v Volume, podDir string, staged bool) *csi.NodeGetVolumeStatsRequest {
	req := &csi.NodeGetVolumeStatsRequest{VolumeId: v.Handle, VolumePath: PublishPath(podDir, v.SpecName)}
	if staged {
		req.StagingTargetPath = StagingPath(root, v.Driver, v.Handle)
	}
	return req
}

// ExpandRequest is the NodeExpandVolume request growing v, published into
// the pod whose directory is podDir, to newSize bytes: the staging path
// only where the volume was staged (CSI: set for drivers with
// STAGE_UNSTAGE_VOLUME), and the volume's capability without the fsGroup,
// as the kubelet sends it.
func ExpandRequest(root string, v Volume, podDir string, staged bool, caps Capabilities, newSize int64, secrets map[string]string) *csi.NodeExpandVolumeRequest {
	req := &csi.NodeExpandVolumeRequest{
		VolumeId:         v.Handle,
		VolumePath:       PublishPath(podDir, v.SpecName),
		CapacityRange:    &csi.CapacityRange{RequiredBytes: newSize},
		VolumeCapability: capability(v, caps, nil),
		Secrets:          secrets,
	}
	if staged {
		req.StagingTargetPath = StagingPath(root, v.Driver, v.Handle)
	}
	return req
}
