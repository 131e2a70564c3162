package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
	"github.com/podvisor/podvisor/internal/host/mounts"
)

// Volumes that live on the host: emptyDir, hostPath, and the tmpfs mounts
// that must be unmounted before a pod's directory can go.

// setupEmptyDir makes an emptyDir: a world-writable directory on disk, or a
// tmpfs for medium Memory when the agent is root. sizeLimit is not enforced
// (upstream evicts the pod; podvisor has no eviction yet), except as the
// size of a tmpfs.
func (vm *Manager) setupEmptyDir(dir string, pod *v1.Pod, ed *v1.EmptyDirVolumeSource) (made bool, err error) {
	if _, err := os.Stat(dir); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return false, err
	}
	if err := os.Chmod(dir, 0o777); err != nil { // as upstream: any user of the pod may write
		return false, err
	}
	switch ed.Medium {
	case v1.StorageMediumDefault:
		return true, nil
	case v1.StorageMediumMemory:
		if os.Geteuid() != 0 {
			vm.cfg.Log.Info("emptyDir medium Memory is on disk: the agent is not root", "pod", pod.Namespace+"/"+pod.Name, "dir", dir)
			return true, nil
		}
		opts := "mode=1777"
		if ed.SizeLimit != nil && !ed.SizeLimit.IsZero() {
			opts += fmt.Sprintf(",size=%d", ed.SizeLimit.Value())
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return false, fmt.Errorf("mount tmpfs: %w", err)
		}
		return true, nil
	}
	return false, fmt.Errorf("emptyDir medium %q is not supported by the process runtime", ed.Medium)
}

// checkHostPath applies the hostPath type, as upstream.
func checkHostPath(hp *v1.HostPathVolumeSource) error {
	t := v1.HostPathUnset
	if hp.Type != nil {
		t = *hp.Type
	}
	p := hp.Path
	fi, err := os.Stat(p)
	exists := err == nil
	switch t {
	case v1.HostPathUnset:
		return nil
	case v1.HostPathDirectoryOrCreate:
		if !exists {
			return os.MkdirAll(p, 0o755)
		}
		if !fi.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", p)
		}
	case v1.HostPathFileOrCreate:
		if !exists {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
		if fi.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", p)
		}
	case v1.HostPathDirectory:
		if !exists || !fi.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", p)
		}
	case v1.HostPathFile:
		if !exists || !fi.Mode().IsRegular() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", p)
		}
	case v1.HostPathSocket:
		if !exists || fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a socket file", p)
		}
	case v1.HostPathCharDev:
		if !exists || fi.Mode()&os.ModeCharDevice == 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a character device", p)
		}
	case v1.HostPathBlockDev:
		if !exists || fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
			return fmt.Errorf("hostPath type check failed: %s is not a block device", p)
		}
	default:
		return fmt.Errorf("hostPath type %q is not supported", t)
	}
	return nil
}

// TearDown unmounts what SetUp mounted under the pod directory podDir
// (memory-backed emptyDirs), so that removing the directory removes all; it
// is also how the directory of a pod the agent does not know is emptied.
// Reading /proc/self/mountinfo while other mounts come and go (a busy
// node: containerd mounting rootfs) can miss an entry, and a missed tmpfs
// stayed mounted with its directory, so each volume directory is also
// unmounted by path (EINVAL for one that is no mount point).
//
// It reports whether the directory may go. Not while a CSI volume
// published into it could not be unpublished by its driver — not
// registered (yet: a node that comes back runs its driver's pod after the
// agent starts) or failing: then nothing is unmounted and the sweep tries
// again, as the kubelet keeps an orphaned pod's directory while volumes
// are in it. Detaching the volume by path instead would leave it staged,
// its driver never told, and removing the directory would reach into it.
func (vm *Manager) TearDown(podDir string) bool {
	if !vm.unmountOnTearDown(podDir) {
		return false
	}
	unmountUnder(podDir)
	// A CSI volume whose driver did not unpublish it is mounted one level
	// deeper (…/kubernetes.io~csi/<pv>/mount); detached by path too, so
	// that removing the pod directory never reaches into the volume.
	published, _ := filepath.Glob(noderequest.PublishPath(podDir, "*"))
	for _, m := range published {
		_ = unix.Unmount(m, unix.MNT_DETACH)
	}
	plugins, _ := os.ReadDir(filepath.Join(podDir, "volumes"))
	for _, p := range plugins {
		vols, _ := os.ReadDir(filepath.Join(podDir, "volumes", p.Name()))
		for _, v := range vols {
			if v.IsDir() {
				_ = unix.Unmount(filepath.Join(podDir, "volumes", p.Name(), v.Name()), unix.MNT_DETACH)
			}
		}
	}
	return true
}

// sweep removes the directories of pods no worker holds that a plain
// removal could not remove: a tmpfs was still mounted in them, or a CSI
// volume whose driver could not unpublish it then (TearDown).
func (vm *Manager) sweep() {
	live := vm.cfg.Pods.Dirs()
	root := filepath.Clean(vm.cfg.PodsDir) + string(filepath.Separator)
	stale := map[string]bool{}
	for _, mp := range mountPoints() {
		rest, ok := strings.CutPrefix(mp, root)
		if !ok {
			continue
		}
		podDir, _, _ := strings.Cut(rest, string(filepath.Separator))
		if !live[podDir] {
			stale[podDir] = true
		}
	}
	entries, _ := os.ReadDir(vm.cfg.PodsDir)
	for _, e := range entries {
		if recs, _ := records(filepath.Join(root, e.Name())); len(recs) > 0 && !live[e.Name()] {
			stale[e.Name()] = true
		}
	}
	for podDir := range stale {
		if vm.TearDown(filepath.Join(root, podDir)) {
			os.RemoveAll(filepath.Join(root, podDir))
		}
	}
}

func unmountUnder(dir string) { mounts.UnmountUnder(dir, mountPoints()) }

// mountPoints lists the mount points of the agent's mount namespace (a
// variable for the tests).
var mountPoints = mounts.Points
