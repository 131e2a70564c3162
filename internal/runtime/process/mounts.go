package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Containers share the host's root filesystem; as root each one gets a
// private mount namespace in which the spec's mounts (volumes, the
// termination message file) are bind mounts at their container paths. The
// shim builds that namespace on a dedicated OS thread and starts the
// container from it: the container inherits it, the shim's other threads
// never see it, and the thread, with its namespace, ends right after.

// hostDevStaging is where, inside the new namespace only, the host's /dev is
// held while a private /dev is assembled over it.
const hostDevStaging = "hostdev"

// containerMounts is every mount the container gets: the spec's and the
// termination message file at TerminationMessagePath.
func containerMounts(c instanceConfig) []runtime.Mount {
	mounts := append([]runtime.Mount(nil), c.Spec.Mounts...)
	if c.TerminationMessageFile != "" && c.Spec.TerminationMessagePath != "" {
		mounts = append(mounts, runtime.Mount{HostPath: c.TerminationMessageFile, ContainerPath: c.Spec.TerminationMessagePath})
	}
	return mounts
}

// inNewMountNamespace runs fn on a fresh OS thread that first enters a new,
// recursively private mount namespace and sets up mounts in it.
func inNewMountNamespace(d instanceDir, mounts []runtime.Mount, fn func() (*os.Process, error)) (*os.Process, error) {
	type result struct {
		p   *os.Process
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread exits with this goroutine, so no other
		// goroutine ever runs in the container's namespace.
		goruntime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- result{err: fmt.Errorf("new mount namespace: %w", err)}
			return
		}
		// Nothing mounted here may propagate back to the host.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- result{err: fmt.Errorf("make mounts private: %w", err)}
			return
		}
		if err := applyMounts(d, mounts); err != nil {
			done <- result{err: err}
			return
		}
		p, err := fn()
		done <- result{p, err}
	}()
	r := <-done
	return r.p, r.err
}

// applyMounts bind-mounts each mount at its container path, creating the
// mount point when it is missing. A mount point under /dev that is missing
// gets a private /dev first, so that the host's /dev is never written to.
func applyMounts(d instanceDir, mounts []runtime.Mount) error {
	for _, m := range mounts {
		if underDev(m.ContainerPath) {
			if _, err := os.Lstat(m.ContainerPath); errors.Is(err, os.ErrNotExist) {
				if err := privateDev(d.path(hostDevStaging)); err != nil {
					return fmt.Errorf("private /dev: %w", err)
				}
				break
			}
		}
	}
	for _, m := range mounts {
		if underDev(m.ContainerPath) {
			if err := checkDevMountPoint(m.ContainerPath); err != nil {
				return err
			}
		}
		if err := bindMount(m); err != nil {
			return err
		}
	}
	return nil
}

// checkDevMountPoint refuses a missing mount point under /dev that would be
// made in a directory of the host: privateDev binds the host's own shm, pts
// and mqueue into the private /dev, so a termination message path or
// mountPath of /dev/shm/x would create x in the host's /dev/shm. A missing
// mount point must land on the private /dev itself.
func checkDevMountPoint(path string) error {
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return nil // there already: bound over, nothing is created
	}
	var dev unix.Stat_t
	if err := unix.Stat("/dev", &dev); err != nil {
		return err
	}
	for p := filepath.Dir(filepath.Clean(path)); p != "/dev" && p != "/"; p = filepath.Dir(p) {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			continue
		}
		if st.Dev != dev.Dev {
			return fmt.Errorf("mount at %s: cannot create the mount point: %s is the host's, and nothing is created on the host's /dev", path, p)
		}
		return nil
	}
	return nil
}

func underDev(p string) bool {
	return strings.HasPrefix(filepath.Clean(p), "/dev/")
}

func bindMount(m runtime.Mount) error {
	if !filepath.IsAbs(m.ContainerPath) {
		return fmt.Errorf("mount %s: container path %q is not absolute", m.HostPath, m.ContainerPath)
	}
	fi, err := os.Stat(m.HostPath)
	if err != nil {
		return fmt.Errorf("mount %s at %s: %w", m.HostPath, m.ContainerPath, err)
	}
	if err := mountPoint(m.ContainerPath, fi.IsDir()); err != nil {
		return fmt.Errorf("mount %s at %s: cannot create the mount point: %w", m.HostPath, m.ContainerPath, err)
	}
	if err := unix.Mount(m.HostPath, m.ContainerPath, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mount %s at %s: %w", m.HostPath, m.ContainerPath, err)
	}
	if m.ReadOnly {
		// A bind mount takes MS_RDONLY only on a remount; keep the flags the
		// source mount has (nosuid, nodev...) or the remount is refused.
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		var st unix.Statfs_t
		if err := unix.Statfs(m.ContainerPath, &st); err == nil {
			flags |= uintptr(st.Flags) & (unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME)
		}
		if err := unix.Mount("", m.ContainerPath, "", flags, ""); err != nil {
			return fmt.Errorf("mount %s at %s read-only: %w", m.HostPath, m.ContainerPath, err)
		}
	}
	return nil
}

// mountPoint makes sure path exists as a directory (dir) or a file to mount over.
func mountPoint(path string, dir bool) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir() != dir:
		if dir {
			return fmt.Errorf("%s is not a directory", path)
		}
		return fmt.Errorf("%s is a directory", path)
	case err == nil:
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if dir {
		return os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// privateDev replaces /dev, in the current mount namespace, by a tmpfs that
// holds what the host's /dev holds: device nodes recreated, directories
// (pts, shm, mqueue...) bind-mounted, symlinks copied. New files under /dev
// then land in the tmpfs.
func privateDev(staging string) error {
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("/dev", staging, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("hold host /dev: %w", err)
	}
	defer unix.Unmount(staging, unix.MNT_DETACH) //nolint:errcheck // namespace-local, gone with it
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID, "mode=755,size=65536k"); err != nil {
		return fmt.Errorf("tmpfs on /dev: %w", err)
	}
	entries, err := os.ReadDir(staging)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := copyDevEntry(filepath.Join(staging, e.Name()), filepath.Join("/dev", e.Name())); err != nil {
			return fmt.Errorf("/dev/%s: %w", e.Name(), err)
		}
	}
	return nil
}

func copyDevEntry(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	mode := st.Mode & unix.S_IFMT
	perm := st.Mode & 0o7777
	switch mode {
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, os.FileMode(perm)); err != nil {
			return err
		}
		return unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, "")
	case unix.S_IFCHR, unix.S_IFBLK:
		if err := unix.Mknod(dst, mode|perm, int(st.Rdev)); err != nil {
			return err
		}
		// mknod applies the umask: set the mode the host has.
		if err := unix.Chmod(dst, perm); err != nil {
			return err
		}
		return unix.Lchown(dst, int(st.Uid), int(st.Gid))
	default: // regular files, sockets, fifos: the host's object itself
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		f.Close()
		return unix.Mount(src, dst, "", unix.MS_BIND, "")
	}
}

// inMountNamespaceOf runs fn on a fresh OS thread that joined the mount
// namespace of process pid (for exec in a running container).
func inMountNamespaceOf(pid int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: see inNewMountNamespace
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		// setns into a mount namespace needs a thread that shares its root
		// and cwd with no other.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			done <- fmt.Errorf("unshare fs: %w", err)
			return
		}
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("join mount namespace of %d: %w", pid, err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// credential is the spec's user as SysProcAttr wants it; nil: the shim's own.
func credential(u *runtime.Credential) *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: append([]uint32(nil), u.Groups...)}
}
