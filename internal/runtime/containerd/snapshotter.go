package containerd

import (
	"os"
	"path/filepath"

	"github.com/containerd/containerd/v2/plugins/snapshots/overlay/overlayutils"
)

// chooseSnapshotter returns overlayfs if an overlay mount works on root's
// file system (not on overlay itself, not on a file system without d_type),
// else native, which copies each layer and works everywhere.
// The error says why overlayfs is not used.
func chooseSnapshotter(root string) (string, error) {
	dir := filepath.Join(root, "io.containerd.snapshotter.v1.overlayfs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "native", err
	}
	if err := overlayutils.Supported(dir); err != nil {
		return "native", err
	}
	return "overlayfs", nil
}
