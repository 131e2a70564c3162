package volume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/expansion"
	"github.com/podvisor/podvisor/internal/agent/volume/claim"
	"github.com/podvisor/podvisor/internal/runtime"
)

// From a container's volumeMounts to the runtime's bind mounts.

// Runtime is what the container runtime does with mounts.
type Runtime struct {
	// Images: containers run images, so each has a root of its own (the
	// runtime makes the mount points there) and image volumes can be
	// mounted.
	Images bool
	// Mounts: volumes can be bind-mounted (the process runtime needs root).
	Mounts bool
}

// Mounts are the container's volumeMounts as runtime mounts (see
// containerMounts); env is the container's environment, for subPathExpr.
func (vm *Manager) Mounts(pod *v1.Pod, c *v1.Container, paths Paths, imageIDs map[string]string, env map[string]string, rt Runtime) ([]runtime.Mount, error) {
	return containerMounts(pod, c, paths, imageIDs, env, rt)
}

// containerMounts are the container's volumeMounts as runtime mounts, with
// subPath and subPathExpr resolved inside the volume. API-data volumes are
// always read-only, as upstream. Image volumes are mounted from the image
// of their ID in imageIDs (EnsureImages). Every way it fails is a
// containerspec.ConfigError.
func containerMounts(pod *v1.Pod, c *v1.Container, paths Paths, imageIDs map[string]string, env map[string]string, f Runtime) ([]runtime.Mount, error) {
	byName := map[string]v1.Volume{}
	for _, v := range pod.Spec.Volumes {
		byName[v.Name] = v
	}
	var out []runtime.Mount
	for _, vmount := range c.VolumeMounts {
		v, ok := byName[vmount.Name]
		src, ok2 := paths[vmount.Name]
		if ok && v.Image != nil {
			src, ok2 = imageIDs[vmount.Name]
		}
		if !ok || !ok2 {
			return nil, containerspec.ConfigError{Msg: fmt.Sprintf("cannot find volume %q to mount into container %q", vmount.Name, c.Name)}
		}
		if v.Image != nil && !f.Images {
			return nil, containerspec.ConfigError{Msg: ImageVolumeUnsupported(pod, c)}
		}
		if !f.Mounts {
			if isDefaultServiceAccountVolume(v, vmount) {
				continue // the API server adds it to every pod; its files are still in the pod directory
			}
			return nil, containerspec.ConfigError{Msg: fmt.Sprintf("volume %q cannot be mounted at %s in container %q: mounts need the agent to run as root", vmount.Name, vmount.MountPath, c.Name)}
		}
		sub := vmount.SubPath
		if vmount.SubPathExpr != "" {
			s, err := expansion.Expand(vmount.SubPathExpr, env)
			if err != nil {
				return nil, containerspec.ConfigError{Msg: fmt.Sprintf("subPathExpr of volumeMount %q of container %q %v", vmount.Name, c.Name, err)}
			}
			sub = s
		}
		if v.Image != nil {
			m, err := imageVolumeMount(vmount, v, src, sub)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
			continue
		}
		host := src
		if sub != "" {
			p, err := subPath(src, sub)
			if err != nil {
				return nil, containerspec.ConfigError{Msg: fmt.Sprintf("failed to prepare subPath for volumeMount %q of container %q: %v", vmount.Name, c.Name, err)}
			}
			host = p
		}
		_, claimRO, _ := claim.Name(pod, &v)
		ro := vmount.ReadOnly || claimRO || v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
		if !f.Images {
			// Host processes share the host's filesystem: the mount point is
			// the host's. A container with an image has a root of its own,
			// where the runtime makes it (the host's paths say nothing).
			if err := mountPointFor(host, vmount.MountPath); err != nil {
				return nil, containerspec.ConfigError{Msg: fmt.Sprintf("volume %q cannot be mounted at %s in container %q: %v", vmount.Name, vmount.MountPath, c.Name, err)}
			}
		}
		out = append(out, runtime.Mount{HostPath: host, ContainerPath: vmount.MountPath, ReadOnly: ro})
	}
	return out, nil
}

// isDefaultServiceAccountVolume is the kube-api-access-* volume the
// ServiceAccount admission plugin adds to every pod.
func isDefaultServiceAccountVolume(v v1.Volume, m v1.VolumeMount) bool {
	return strings.HasPrefix(v.Name, "kube-api-access-") && v.Projected != nil && m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
}

// subPath resolves sub inside the volume at dir; symlinks may not lead out
// of the volume. A subPath that does not exist yet is created as a directory.
// It is walked one name at a time, each resolved and checked before the next
// is looked at or made, as upstream's SafeMakeDir: a missing name under a
// symlink out of the volume (link/newdir, with link -> /etc) is refused, not
// created where the link points.
func subPath(dir, sub string) (string, error) {
	if filepath.IsAbs(sub) {
		return "", fmt.Errorf("subPath %q must be relative", sub)
	}
	for _, part := range strings.Split(filepath.ToSlash(sub), "/") {
		if part == ".." {
			return "", fmt.Errorf("subPath %q must not contain '..'", sub)
		}
	}
	base, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	cur := base // resolved, inside the volume
	for _, part := range strings.Split(filepath.ToSlash(sub), "/") {
		if part == "" || part == "." {
			continue
		}
		next := filepath.Join(cur, part)
		if _, err := os.Lstat(next); errors.Is(err, os.ErrNotExist) {
			// cur holds no symlink and part does not exist: this makes it in cur.
			if err := os.Mkdir(next, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
				return "", err
			}
		} else if err != nil {
			return "", err
		}
		real, err := filepath.EvalSymlinks(next)
		if err != nil {
			return "", err
		}
		if real != base && !strings.HasPrefix(real, base+string(filepath.Separator)) {
			return "", fmt.Errorf("subPath %q leads outside the volume", sub)
		}
		cur = real
	}
	return cur, nil
}

// mountPointFor creates the mount point at target for host when it is
// missing, so that one that cannot be made is a config error before the
// container is created. Containers share the host's filesystem: the mount
// point stays on the host (an empty directory or file). Paths under /dev are
// left to the runtime, which gives the container a private /dev for them.
func mountPointFor(host, target string) error {
	if !filepath.IsAbs(target) {
		return fmt.Errorf("mountPath %q is not absolute", target)
	}
	if strings.HasPrefix(filepath.Clean(target), "/dev/") {
		return nil
	}
	src, err := os.Stat(host)
	if err != nil {
		return err
	}
	fi, err := os.Stat(target)
	switch {
	case err == nil && fi.IsDir() != src.IsDir():
		return fmt.Errorf("%s exists and is not a %s", target, map[bool]string{true: "directory", false: "file"}[src.IsDir()])
	case err == nil:
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if src.IsDir() {
		return os.MkdirAll(target, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
