package containerd

import (
	"bytes"
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
	"github.com/podvisor/podvisor/internal/runtime/pause"
)

// ensureSandboxImage makes sure the sandbox image (pause.ImageName) is
// present and pinned. There is no registry to pull it from: when it is
// missing, podvisor's own pause image is built (internal/runtime/pause) and
// imported. An image the user imported under that name is kept, and pinned.
func (c *Client) ensureSandboxImage(ctx context.Context) error {
	ref := pause.ImageName
	nctx := namespaces.WithNamespace(ctx, Namespace)
	img, err := c.c.ImageService().Get(nctx, ref)
	switch {
	case errdefs.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("sandbox image %s: %w", ref, err)
	default:
		if img.Labels[PinnedLabel] == "pinned" {
			return nil
		}
		if img.Labels == nil {
			img.Labels = map[string]string{}
		}
		img.Labels[PinnedLabel] = "pinned"
		if _, err := c.c.ImageService().Update(nctx, img, "labels."+PinnedLabel); err != nil {
			return fmt.Errorf("sandbox image %s: pin: %w", ref, err)
		}
		return nil
	}
	im, err := pause.Image()
	if err != nil {
		return fmt.Errorf("sandbox image %s: %w", ref, err)
	}
	var b bytes.Buffer
	if err := im.WriteArchive(&b, imagebuild.Docker); err != nil {
		return fmt.Errorf("sandbox image %s: %w", ref, err)
	}
	if _, err := c.importLabelled(ctx, &b, map[string]string{PinnedLabel: "pinned"}); err != nil {
		return fmt.Errorf("sandbox image %s: %w", ref, err)
	}
	return nil
}
