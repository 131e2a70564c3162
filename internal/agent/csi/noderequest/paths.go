// Package noderequest decides what the node asks a CSI driver, as the
// kubelet's CSI plugin does: where a volume is staged and published, and
// the NodeStageVolume/NodePublishVolume requests built from the
// PersistentVolume, the pod and the driver's node capabilities. It does no
// I/O; nodeclient sends what it builds.
package noderequest

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
)

// PluginDirName is the CSI plugin's directory name under the agent's plugins
// directory and, escaped, under a pod's volumes directory, as the kubelet's.
const PluginDirName = "kubernetes.io/csi"

// StagingPath is the global mount directory of one volume on this node:
// <root>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount.
// The handle is hashed, as upstream does, because handles may hold any
// characters and be longer than a path element may be.
func StagingPath(root, driver, volumeHandle string) string {
	sum := sha256.Sum256([]byte(volumeHandle))
	return filepath.Join(root, "plugins", PluginDirName, driver, fmt.Sprintf("%x", sum), "globalmount")
}

// PublishPath is where a pod's volume is published:
// <podDir>/volumes/kubernetes.io~csi/<specVolumeName>/mount, where the spec
// volume name is the PV's name (or the inline volume's name). The pod
// directory's own layout is the volume manager's.
func PublishPath(podDir, specVolumeName string) string {
	return filepath.Join(podDir, "volumes", escape(PluginDirName), escape(specVolumeName), "mount")
}

// escape makes a qualified name one path element, as the kubelet does
// ("kubernetes.io/csi" becomes "kubernetes.io~csi").
func escape(name string) string {
	return strings.ReplaceAll(name, "/", "~")
}
