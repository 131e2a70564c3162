package containerd

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"github.com/podvisor/podvisor/internal/imagetar"
)

// ensureSandboxImage makes sure the sandbox image ref is present and pinned.
// There is no registry to pull it from: when it is missing, it is built from
// the static pause binary (podvisor-pause) and imported. An image imported
// by the user under that name is kept, and pinned.
func (c *Client) ensureSandboxImage(ctx context.Context, ref, pauseBinary string) error {
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
	if pauseBinary == "" {
		return fmt.Errorf("sandbox image %s is not in containerd and %s was not found next to podvisor or in PATH: build it (go build -o bin/ ./cmd/podvisor-pause) or import the image (podvisor image import FILE)", ref, PauseBinary)
	}
	var b bytes.Buffer
	if err := PauseImage(&b, ref, pauseBinary); err != nil {
		return fmt.Errorf("sandbox image %s: %w", ref, err)
	}
	if _, err := c.importLabelled(ctx, &b, map[string]string{PinnedLabel: "pinned"}); err != nil {
		return fmt.Errorf("sandbox image %s: %w", ref, err)
	}
	return nil
}

// PauseImage writes, as a docker-archive, the image ref holding only the
// binary pauseBinary as /pause, its entrypoint. The binary must be static:
// the image has no libc.
func PauseImage(w io.Writer, ref, pauseBinary string) error {
	if err := checkStatic(pauseBinary); err != nil {
		return err
	}
	data, err := os.ReadFile(pauseBinary)
	if err != nil {
		return err
	}
	return imagetar.WriteDocker(w, imagetar.Image{
		Ref:        ref,
		Files:      []imagetar.File{{Path: "/pause", Mode: 0o755, Data: data}},
		Entrypoint: []string{"/pause"},
		User:       "65535:65535",
	})
}

// checkStatic refuses a dynamically linked binary, which would fail in the
// sandbox with an obscure "no such file or directory".
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("pause binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("pause binary %s is dynamically linked; the image needs a static one (CGO_ENABLED=0)", path)
		}
	}
	return nil
}
