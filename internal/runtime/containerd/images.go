package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
)

// Namespace is containerd's namespace for the CRI: the only images the CRI
// (and so the agent) sees are the ones in it.
const Namespace = "k8s.io"

// PinnedLabel keeps an image from the CRI's image garbage collection.
const PinnedLabel = "io.cri-containerd.pinned"

// Client imports and lists images in a running containerd's CRI namespace.
type Client struct {
	c           *containerd.Client
	snapshotter string
}

// Image is an image in the CRI namespace.
type Image struct {
	Name   string
	Digest string // the manifest's (or index's) digest
	Size   int64  // of its content for this platform, compressed
	Pinned bool
}

// Connect connects to the containerd podvisor runs for dataDir, which must
// be running (`podvisor image` uses it from another process).
func Connect(ctx context.Context, dataDir string) (*Client, error) {
	paths, err := PathsFor(dataDir)
	if err != nil {
		return nil, err
	}
	snapshotter, err := readSnapshotter(paths.Config)
	if err != nil {
		return nil, fmt.Errorf("no containerd configured for data dir %s: %w", dataDir, err)
	}
	if !Serving(paths.Socket) {
		return nil, fmt.Errorf("containerd of data dir %s is not running (no answer on %s): start podvisor first", dataDir, paths.Socket)
	}
	return dial(ctx, paths.Socket, snapshotter)
}

func dial(ctx context.Context, socket, snapshotter string) (*Client, error) {
	c, err := containerd.New(socket, containerd.WithDefaultNamespace(Namespace), containerd.WithTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	return &Client{c: c, snapshotter: snapshotter}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.c.Close() }

// Import imports the images of one archive: a docker-archive (`docker save`)
// or an OCI-layout tar, plain or compressed with gzip or zstd. Each image,
// for this machine's platform, is unpacked for the CRI's snapshotter, so a
// container can start from it without a pull. Images already present are
// replaced and keep their labels.
func (c *Client) Import(ctx context.Context, r io.Reader) ([]Image, error) {
	return c.importLabelled(ctx, r, nil)
}

func (c *Client) importLabelled(ctx context.Context, r io.Reader, labels map[string]string) ([]Image, error) {
	ctx = namespaces.WithNamespace(ctx, Namespace)
	tr, err := compression.DecompressStream(r)
	if err != nil {
		return nil, fmt.Errorf("not an image archive: %w", err)
	}
	defer tr.Close()
	opts := []containerd.ImportOpt{
		containerd.WithImportPlatform(platforms.Default()),
		containerd.WithSkipMissing(), // other platforms' layers need not be in the archive
		containerd.WithImageRefTranslator(normalizeRef),
	}
	if labels != nil {
		opts = append(opts, containerd.WithImageLabels(labels))
	}
	imgs, err := c.c.Import(ctx, tr, opts...)
	if err != nil {
		return nil, fmt.Errorf("not an image archive (docker-archive or OCI layout): %w", err)
	}
	if len(imgs) == 0 {
		return nil, errors.New("the archive names no image (an OCI layout needs the annotation org.opencontainers.image.ref.name on its manifests)")
	}
	var out []Image
	for _, img := range imgs {
		i := containerd.NewImageWithPlatform(c.c, img, platforms.Default())
		if err := i.Unpack(ctx, c.snapshotter); err != nil {
			return out, fmt.Errorf("image %s: unpack for %s: %w", img.Name, c.snapshotter, err)
		}
		out = append(out, c.describe(ctx, img))
	}
	return out, nil
}

// normalizeRef turns an OCI layout's short names (busybox:1.37) into the
// full references the CRI looks up (docker.io/library/busybox:1.37), as
// docker-archive names are.
func normalizeRef(name string) string {
	if n, err := reference.ParseDockerRef(name); err == nil {
		return n.String()
	}
	return name
}

// ImportFile imports the archive at path (see Import).
func (c *Client) ImportFile(ctx context.Context, path string) ([]Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	imgs, err := c.Import(ctx, f)
	if err != nil {
		return imgs, fmt.Errorf("%s: %w", path, err)
	}
	return imgs, nil
}

// ImportResult is what importing one file gave.
type ImportResult struct {
	File   string
	Images []Image
	Err    error
}

// archiveSuffixes are the files of an images folder that are imported, as
// in k3s's agent/images.
var archiveSuffixes = []string{".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst"}

// IsArchiveName reports whether an images folder's file is imported.
func IsArchiveName(name string) bool {
	for _, s := range archiveSuffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// ImportDir imports every archive of dir (.tar, .tar.gz, .tgz, .tar.zst,
// .tzst), in name order; one bad file does not stop the others. A missing
// dir imports nothing.
func (c *Client) ImportDir(ctx context.Context, dir string) []ImportResult {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return []ImportResult{{File: dir, Err: err}}
	}
	var out []ImportResult
	for _, e := range entries {
		if !e.Type().IsRegular() || !IsArchiveName(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		imgs, err := c.ImportFile(ctx, path)
		out = append(out, ImportResult{File: path, Images: imgs, Err: err})
	}
	return out
}

// List lists the images in the CRI namespace, by name. The CRI's own
// references by image ID (sha256:…, one per image) are left out.
func (c *Client) List(ctx context.Context) ([]Image, error) {
	ctx = namespaces.WithNamespace(ctx, Namespace)
	imgs, err := c.c.ImageService().List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Image, 0, len(imgs))
	for _, img := range imgs {
		if strings.HasPrefix(img.Name, "sha256:") {
			continue
		}
		out = append(out, c.describe(ctx, img))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Has reports whether the CRI namespace holds the image named ref.
func (c *Client) Has(ctx context.Context, ref string) (bool, error) {
	ctx = namespaces.WithNamespace(ctx, Namespace)
	_, err := c.c.ImageService().Get(ctx, ref)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func (c *Client) describe(ctx context.Context, img images.Image) Image {
	size, _ := containerd.NewImageWithPlatform(c.c, img, platforms.Default()).Size(ctx)
	return Image{
		Name:   img.Name,
		Digest: img.Target.Digest.String(),
		Size:   size,
		Pinned: img.Labels[PinnedLabel] == "pinned",
	}
}
