package runtime

import (
	"context"
	"io"
)

// Images is the image store of a runtime that runs images.
type Images interface {
	// ImageStatus describes the image ref names; ok is false when the
	// runtime does not have it.
	ImageStatus(ctx context.Context, ref string) (img Image, ok bool, err error)
	// PullImage fetches ref (with auth when not nil) and returns the image's
	// ID. An unknown image or repository is ErrNotFound, bad credentials
	// ErrInvalid, a registry that cannot be reached ErrUnavailable.
	PullImage(ctx context.Context, ref string, auth *RegistryAuth) (id string, err error)
	ListImages(ctx context.Context) ([]Image, error)
	RemoveImage(ctx context.Context, ref string) error
	// ImportImages loads the images of a docker-archive or OCI-layout tar
	// (plain, gzip or zstd) and returns their names.
	ImportImages(ctx context.Context, tar io.Reader) ([]string, error)
	// ImageFsInfo says where the images are stored (CRI ImageFsInfo), so
	// that the agent can measure that filesystem for image garbage
	// collection.
	ImageFsInfo(ctx context.Context) (ImageFsUsage, error)
}

// Image is an image the runtime has.
type Image struct {
	ID          string   // sha256:…, shown as a container's imageID
	RepoTags    []string // e.g. docker.io/library/busybox:latest
	RepoDigests []string
	Size        uint64
	Pinned      bool // never garbage-collected (the sandbox image)
	// From the image config: what the runtime uses when the container spec
	// leaves it unset.
	User       string
	StopSignal string
}

// RegistryAuth is one set of credentials for a registry (from an
// imagePullSecret or the service account's).
type RegistryAuth struct {
	Username      string
	Password      string
	Auth          string // base64 user:password, as in .dockerconfigjson
	ServerAddress string
	IdentityToken string
	RegistryToken string
}

// ImageFsUsage is the filesystem holding a runtime's images.
type ImageFsUsage struct {
	// Mountpoint is a directory on that filesystem (containerd: its
	// snapshotter's root).
	Mountpoint string
	// UsedBytes is what the images take there, as the runtime counts it.
	UsedBytes uint64
}
