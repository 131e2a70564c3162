package volume

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/images"
	"github.com/podvisor/podvisor/internal/agent/podref"
	"github.com/podvisor/podvisor/internal/runtime"
)

// Image volumes (volumes[].image, GA in v1.36): an image's filesystem,
// mounted read-only by the runtime. The agent has nothing to set up on
// disk (upstream's image volume plugin does nothing either); before a
// container that mounts one is created, the volume's image is ensured
// through the image manager, as a container's image, and the container's
// CRI mount names the image instead of a host path.

// mountedImageVolumes are the image volumes c mounts, in the pod's order of
// volumes, each once.
func mountedImageVolumes(pod *v1.Pod, c *v1.Container) []*v1.Volume {
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounted[m.Name] = true
	}
	var out []*v1.Volume
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; v.Image != nil && mounted[v.Name] {
			out = append(out, v)
		}
	}
	return out
}

// ImageVolumeUnsupported says why a runtime without images cannot run c: the
// first image volume it mounts; "" when it mounts none.
func ImageVolumeUnsupported(pod *v1.Pod, c *v1.Container) string {
	if vols := mountedImageVolumes(pod, c); len(vols) > 0 {
		return fmt.Sprintf("container %q: volume %q is an image volume (volumes[].image), which the process runtime cannot mount: it runs host processes and has no images (use --runtime=containerd)", c.Name, vols[0].Name)
	}
	return ""
}

// EnsureImages makes the image of every image volume c mounts present
// as its pull policy says and returns each image's ID by volume name. As
// upstream, every volume is tried; a failure is an *images.Failure — the
// last in c's volumeMounts' order, which the container waits with — and
// each failing mount but that one gets its Failed event here (the caller
// records the returned failure's).
func (vm *Manager) EnsureImages(ctx context.Context, pod *v1.Pod, c *v1.Container) (map[string]string, error) {
	vols := mountedImageVolumes(pod, c)
	if len(vols) == 0 || vm.cfg.Images == nil {
		return nil, nil
	}
	ids := map[string]string{}
	failed := map[string]*images.Failure{}
	for _, v := range vols {
		req := images.Request{Pod: pod, Volume: v}
		if vm.cfg.PullSecrets != nil {
			req.PullSecrets = func(ctx context.Context) []v1.Secret { return vm.cfg.PullSecrets(ctx, pod) }
		}
		img, err := vm.cfg.Images.Ensure(ctx, req)
		var f *images.Failure
		switch {
		case errors.As(err, &f):
			failed[v.Name] = f
		case err != nil:
			return nil, err
		default:
			ids[v.Name] = img.ID
		}
	}
	var last *images.Failure
	for _, m := range c.VolumeMounts {
		f := failed[m.Name]
		if f == nil {
			continue
		}
		if last != nil {
			vm.cfg.Recorder.Event(podref.Container(pod, c.Name), v1.EventTypeWarning, images.EventFailed, images.FailedEventMessage(last.Reason))
		}
		last = f
	}
	if last != nil {
		return nil, last
	}
	return ids, nil
}

// imageVolumeMount is the runtime mount of an image volume: the image by
// its ID, read-only whatever the volumeMount says, and sub (subPath or the
// expanded subPathExpr) checked as upstream's makeMounts does before the
// runtime resolves it inside the image.
func imageVolumeMount(vmount v1.VolumeMount, v v1.Volume, imageID, sub string) (runtime.Mount, error) {
	if sub != "" {
		if filepath.IsAbs(sub) {
			return runtime.Mount{}, containerspec.ConfigError{Msg: fmt.Sprintf("error SubPath `%s` must not be an absolute path", sub)}
		}
		for _, part := range strings.Split(filepath.ToSlash(sub), "/") {
			if part == ".." {
				return runtime.Mount{}, containerspec.ConfigError{Msg: fmt.Sprintf("unable to provision SubPath `%s`: must not contain '..'", sub)}
			}
		}
	}
	return runtime.Mount{ContainerPath: vmount.MountPath, ReadOnly: true,
		Image: imageID, ImageName: v.Image.Reference, ImageSubPath: sub}, nil
}
