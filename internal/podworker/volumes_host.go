package podworker

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Volumes that live on the host: emptyDir, hostPath, and the tmpfs mounts
// that must be unmounted before a pod's directory can go.

// setupEmptyDir makes an emptyDir: a world-writable directory on disk, or a
// tmpfs for medium Memory when the agent is root. sizeLimit is not enforced
// (upstream evicts the pod; podvisor has no eviction yet), except as the
// size of a tmpfs.
func (vm *volumeManager) setupEmptyDir(dir string, pod *v1.Pod, ed *v1.EmptyDirVolumeSource) (made bool, err error) {
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
			vm.m.cfg.Log.Info("emptyDir medium Memory is on disk: the agent is not root", "pod", pod.Namespace+"/"+pod.Name, "dir", dir)
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

// teardownVolumes unmounts what setup mounted under the pod's directory
// (memory-backed emptyDirs), so that removing the directory removes all.
// Reading /proc/self/mountinfo while other mounts come and go (a busy
// node: containerd mounting rootfs) can miss an entry, and a missed tmpfs
// stayed mounted with its directory, so each volume directory is also
// unmounted by path (EINVAL for one that is no mount point).
func (w *worker) teardownVolumes() {
	dir := w.podDir()
	unmountUnder(dir)
	plugins, _ := os.ReadDir(filepath.Join(dir, "volumes"))
	for _, p := range plugins {
		vols, _ := os.ReadDir(filepath.Join(dir, "volumes", p.Name()))
		for _, v := range vols {
			if v.IsDir() {
				_ = unix.Unmount(filepath.Join(dir, "volumes", p.Name(), v.Name()), unix.MNT_DETACH)
			}
		}
	}
}

// sweep removes the directories of pods no worker holds that a plain
// removal could not remove because a tmpfs was still mounted in them.
func (vm *volumeManager) sweep() {
	live := map[string]bool{}
	vm.m.mu.Lock()
	for _, w := range vm.m.workers {
		live[w.podDirName()] = true
	}
	vm.m.mu.Unlock()
	root := filepath.Clean(vm.m.cfg.PodsDir) + string(filepath.Separator)
	for _, mp := range mountPoints() {
		rest, ok := strings.CutPrefix(mp, root)
		if !ok {
			continue
		}
		podDir, _, _ := strings.Cut(rest, string(filepath.Separator))
		if live[podDir] {
			continue
		}
		unmountUnder(filepath.Join(root, podDir))
		os.RemoveAll(filepath.Join(root, podDir))
	}
}

func unmountUnder(dir string) {
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	mps := mountPoints()
	for i := len(mps) - 1; i >= 0; i-- { // the deepest (latest) first
		if strings.HasPrefix(mps[i], prefix) {
			_ = unix.Unmount(mps[i], unix.MNT_DETACH)
		}
	}
}

// mountPoints lists the mount points of the agent's mount namespace.
var mountPoints = readMountPoints

func readMountPoints() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	// A reader, not a Scanner: a mount line longer than a Scanner's 64 KiB
	// (an overlay with many layers) would end the listing early.
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if fields := strings.Fields(line); len(fields) > 4 {
			out = append(out, unescapeMountPath(fields[4]))
		}
		if err != nil {
			break
		}
	}
	return out
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
