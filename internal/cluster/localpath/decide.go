// Package localpath is podvisor's built-in local-path provisioner, the
// equivalent of k3s's: StorageClass local-path (the default,
// WaitForFirstConsumer, reclaim Delete) with k3s's provisioner name, so
// that manifests written for k3s work unchanged. Every node runs it for
// itself, in-process: it provisions the claims the scheduler selected this
// node for, as directories under its storage root with node affinity to the
// node, and deletes the directory of a released Delete PV it made. The
// provisioning controller is sig-storage-lib-external-provisioner's.
package localpath

import (
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	// ProvisionerName is k3s's, so that StorageClasses written for k3s
	// find this provisioner.
	ProvisionerName = "rancher.io/local-path"
	// StorageClassName is the default StorageClass the server creates.
	StorageClassName = "local-path"

	// annSelectedNode is where the scheduler records the node a
	// WaitForFirstConsumer claim is provisioned on.
	annSelectedNode = "volume.kubernetes.io/selected-node"
	// annNode marks a PV with the node whose directory it is (k3s's
	// local-path-provisioner uses the same annotation).
	annNode = "local.path.provisioner/selected-node"
	// annVolumeType on a PVC, or parameter volumeType of the class, picks
	// the PV type: hostPath (the default, as k3s) or local.
	annVolumeType = "volumeType"
)

// DefaultStorageClass is the local-path StorageClass, marked the default.
func DefaultStorageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: StorageClassName, Annotations: map[string]string{
			"storageclass.kubernetes.io/is-default-class": "true",
		}, Labels: map[string]string{"app.kubernetes.io/managed-by": "podvisor"}},
		Provisioner:       ProvisionerName,
		ReclaimPolicy:     ptr.To(v1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

// forNode: the claim is this node's to provision (the scheduler selected
// it). Claims of other nodes are theirs.
func forNode(pvc *v1.PersistentVolumeClaim, node string) bool {
	return pvc.Annotations[annSelectedNode] == node
}

// ownedBy: the PV is a directory this node made under root. Only such PVs
// have their directory deleted here.
func ownedBy(pv *v1.PersistentVolume, node, root string) bool {
	if pv.Annotations[annNode] != node || pv.Annotations["pv.kubernetes.io/provisioned-by"] != ProvisionerName {
		return false
	}
	_, err := volumeDir(pv, root)
	return err == nil
}

// volumeDir is the PV's directory, refused unless it is a direct child of
// root (a PV edited to point elsewhere must not get its path removed).
func volumeDir(pv *v1.PersistentVolume, root string) (string, error) {
	var p string
	switch {
	case pv.Spec.HostPath != nil:
		p = pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		p = pv.Spec.Local.Path
	default:
		return "", fmt.Errorf("PV %s is neither hostPath nor local", pv.Name)
	}
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || filepath.Dir(p) != filepath.Clean(root) {
		return "", fmt.Errorf("PV %s: path %q is not a directory of the storage root %s", pv.Name, p, root)
	}
	return p, nil
}

// Request is what a PV is made for.
type Request struct {
	PVName string
	PVC    *v1.PersistentVolumeClaim
	Class  *storagev1.StorageClass
	Node   string
	Root   string
}

// volumeFor is the PV for a claim and its directory, as k3s names it:
// <pv>_<namespace>_<claim> under the storage root.
func volumeFor(r Request) (*v1.PersistentVolume, string, error) {
	pvc := r.PVC
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == v1.PersistentVolumeBlock {
		return nil, "", fmt.Errorf("%s provisions only volumeMode Filesystem, not Block", ProvisionerName)
	}
	if sel := pvc.Spec.Selector; sel != nil && (len(sel.MatchLabels) > 0 || len(sel.MatchExpressions) > 0) {
		return nil, "", fmt.Errorf("claim selector is not supported")
	}
	vt := "hostPath"
	if r.Class != nil && r.Class.Parameters[annVolumeType] != "" {
		vt = r.Class.Parameters[annVolumeType]
	}
	if t := pvc.Annotations[annVolumeType]; t != "" {
		vt = t
	}
	for _, name := range []string{r.PVName, pvc.Namespace, pvc.Name} {
		if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
			return nil, "", fmt.Errorf("cannot name a directory for claim %s/%s (volume %q)", pvc.Namespace, pvc.Name, r.PVName)
		}
	}
	dir := filepath.Join(r.Root, r.PVName+"_"+pvc.Namespace+"_"+pvc.Name)
	var src v1.PersistentVolumeSource
	switch strings.ToLower(vt) {
	case "hostpath":
		src.HostPath = &v1.HostPathVolumeSource{Path: dir, Type: ptr.To(v1.HostPathDirectoryOrCreate)}
	case "local":
		src.Local = &v1.LocalVolumeSource{Path: dir}
	default:
		return nil, "", fmt.Errorf("volumeType %q is not supported (hostPath or local)", vt)
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if r.Class != nil && r.Class.ReclaimPolicy != nil {
		reclaim = *r.Class.ReclaimPolicy
	}
	var mountOptions []string
	if r.Class != nil {
		mountOptions = r.Class.MountOptions
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: r.PVName, Annotations: map[string]string{annNode: r.Node}},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    ptr.To(v1.PersistentVolumeFilesystem),
			Capacity:                      v1.ResourceList{v1.ResourceStorage: pvc.Spec.Resources.Requests[v1.ResourceStorage]},
			PersistentVolumeSource:        src,
			MountOptions:                  mountOptions,
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{r.Node}}},
			}}}},
		},
	}
	return pv, dir, nil
}
