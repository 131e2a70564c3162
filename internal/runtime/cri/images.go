package cri

import (
	"context"
	"fmt"
	"io"
	"strconv"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// ImageStatus describes ref; ok is false when the runtime does not have it.
func (r *Runtime) ImageStatus(ctx context.Context, ref string) (runtime.Image, bool, error) {
	resp, err := r.is.ImageStatus(quiet(ctx), &runtimeapi.ImageSpec{Image: ref}, false)
	if err != nil {
		return runtime.Image{}, false, classify(err, "image %s", ref)
	}
	if resp.GetImage() == nil {
		return runtime.Image{}, false, nil
	}
	return image(resp.GetImage()), true, nil
}

// PullImage pulls ref with auth (nil: anonymous) and returns the image's ID.
func (r *Runtime) PullImage(ctx context.Context, ref string, auth *runtime.RegistryAuth) (string, error) {
	var a *runtimeapi.AuthConfig
	if auth != nil {
		a = &runtimeapi.AuthConfig{
			Username: auth.Username, Password: auth.Password, Auth: auth.Auth,
			ServerAddress: auth.ServerAddress, IdentityToken: auth.IdentityToken, RegistryToken: auth.RegistryToken,
		}
	}
	pulled, err := r.is.PullImage(quiet(ctx), &runtimeapi.ImageSpec{Image: ref}, a, nil)
	if err != nil {
		return "", classify(err, "pull image %s", ref)
	}
	// The runtime answers with a reference to the image (containerd: its
	// ID; CRI-O: a digest of the repository).
	if img, ok, err := r.ImageStatus(ctx, pulled); err == nil && ok {
		return img.ID, nil
	}
	return pulled, nil
}

func (r *Runtime) ListImages(ctx context.Context) ([]runtime.Image, error) {
	list, err := r.is.ListImages(quiet(ctx), nil)
	if err != nil {
		return nil, classify(err, "list images")
	}
	out := make([]runtime.Image, 0, len(list))
	for _, img := range list {
		out = append(out, image(img))
	}
	return out, nil
}

// RemoveImage removes ref; an image the runtime does not have is ErrNotFound.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) error {
	if _, ok, err := r.ImageStatus(ctx, ref); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("remove image %s: %w", ref, runtime.ErrNotFound)
	}
	if err := r.is.RemoveImage(quiet(ctx), &runtimeapi.ImageSpec{Image: ref}); err != nil {
		return classify(err, "remove image %s", ref)
	}
	return nil
}

// ImportImages is refused: CRI has no call to import an image. podvisor
// imports into the containerd it runs through internal/runtime/containerd, which
// speaks containerd's own API.
func (r *Runtime) ImportImages(context.Context, io.Reader) ([]string, error) {
	return nil, fmt.Errorf("import images: CRI has no import; images are imported through podvisor's containerd: %w", runtime.ErrInvalid)
}

// image maps a CRI image. CRI does not carry the image's STOPSIGNAL: the
// runtime applies it itself when the container has none.
func image(img *runtimeapi.Image) runtime.Image {
	out := runtime.Image{
		ID:          img.GetId(),
		RepoTags:    img.GetRepoTags(),
		RepoDigests: img.GetRepoDigests(),
		Size:        img.GetSize(),
		Pinned:      img.GetPinned(),
		User:        img.GetUsername(),
	}
	if uid := img.GetUid(); uid != nil && out.User == "" {
		out.User = strconv.FormatInt(uid.GetValue(), 10)
	}
	return out
}

// ImageFsInfo reports the runtime's first image filesystem (containerd has
// one: its snapshotter's).
func (r *Runtime) ImageFsInfo(ctx context.Context) (runtime.ImageFsUsage, error) {
	resp, err := r.is.ImageFsInfo(quiet(ctx))
	if err != nil {
		return runtime.ImageFsUsage{}, classify(err, "image filesystem info")
	}
	for _, fs := range resp.GetImageFilesystems() {
		if mp := fs.GetFsId().GetMountpoint(); mp != "" {
			return runtime.ImageFsUsage{Mountpoint: mp, UsedBytes: fs.GetUsedBytes().GetValue()}, nil
		}
	}
	return runtime.ImageFsUsage{}, fmt.Errorf("image filesystem info: the runtime names no image filesystem: %w", runtime.ErrUnavailable)
}
