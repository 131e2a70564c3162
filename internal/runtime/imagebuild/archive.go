package imagebuild

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/distribution/reference"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Format is the layout of an image tar; both are what `ctr images import`,
// containerd's client.Import and `docker load` take.
type Format int

const (
	// Docker is `docker save`'s layout: manifest.json naming the config and
	// layers, with every name in RepoTags.
	Docker Format = iota + 1
	// OCI is an OCI image layout: oci-layout, index.json with one manifest
	// entry per name, blobs/sha256/.
	OCI
)

func (f Format) String() string {
	switch f {
	case Docker:
		return "docker-archive"
	case OCI:
		return "oci-layout"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// ociImageNameAnnotation carries the full name for containerd's importer;
// org.opencontainers.image.ref.name holds only the tag, as the spec says.
const ociImageNameAnnotation = "io.containerd.image.name"

// WriteArchive writes im to w as a tar in format f.
//
// The archive is written here rather than by tarball.MultiRefWrite because
// that orders RepoTags by map iteration: two names would give different bytes
// on each run.
func (im Image) WriteArchive(w io.Writer, f Format) error {
	names := make([]string, len(im.Names))
	for i, n := range im.Names {
		norm, err := NormalizeName(n)
		if err != nil {
			return err
		}
		names[i] = norm
	}
	img, err := im.Build()
	if err != nil {
		return err
	}
	a := &archive{tw: tar.NewWriter(w)}
	switch f {
	case Docker:
		err = a.docker(img, names)
	case OCI:
		err = a.oci(img, names)
	default:
		err = fmt.Errorf("unknown archive format %d", f)
	}
	if err != nil {
		return fmt.Errorf("image %s: %s: %w", names[0], f, err)
	}
	return a.tw.Close()
}

// WriteArchiveFile writes the archive to a temporary file beside path and
// renames it into place, so a reader never sees half an image.
func (im Image) WriteArchiveFile(path string, f Format) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := im.WriteArchive(tmp, f); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

type archive struct {
	tw *tar.Writer
}

func (a *archive) docker(img v1.Image, names []string) error {
	if err := a.blobs(img); err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	entry := tarball.Descriptor{Config: blobPath(m.Config.Digest), RepoTags: names}
	for _, l := range m.Layers {
		entry.Layers = append(entry.Layers, blobPath(l.Digest))
	}
	return a.json("manifest.json", tarball.Manifest{entry})
}

func (a *archive) oci(img v1.Image, names []string) error {
	if err := a.file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := a.blobs(img); err != nil {
		return err
	}
	desc, err := partial.Descriptor(img)
	if err != nil {
		return err
	}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, n := range names {
		d := *desc
		d.Annotations = map[string]string{
			ociImageNameAnnotation:              n,
			"org.opencontainers.image.ref.name": tagOf(n),
		}
		index.Manifests = append(index.Manifests, d)
	}
	return a.json("index.json", index)
}

// blobs writes the config, the layers and the manifest under blobs/sha256/.
func (a *archive) blobs(img v1.Image) error {
	if err := a.dir("blobs/"); err != nil {
		return err
	}
	if err := a.dir("blobs/sha256/"); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = a.stream(blobPath(d), rc, size)
		rc.Close()
		if err != nil {
			return err
		}
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	m, err := img.RawManifest()
	if err != nil {
		return err
	}
	for _, b := range [][]byte{cfg, m} {
		h, _, err := v1.SHA256(bytes.NewReader(b))
		if err != nil {
			return err
		}
		if err := a.file(blobPath(h), b); err != nil {
			return err
		}
	}
	return nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// tagOf returns the tag of a normalised name, which always has one.
func tagOf(name string) string {
	if named, err := reference.ParseNormalizedNamed(name); err == nil {
		if t, ok := named.(reference.Tagged); ok {
			return t.Tag()
		}
	}
	return ""
}

func (a *archive) dir(name string) error {
	return a.tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: Epoch})
}

func (a *archive) json(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return a.file(name, b)
}

func (a *archive) file(name string, data []byte) error {
	return a.stream(name, bytes.NewReader(data), int64(len(data)))
}

func (a *archive) stream(name string, r io.Reader, size int64) error {
	hdr := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: Epoch}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(a.tw, r)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%s: wrote %d bytes, expected %d", name, n, size)
	}
	return nil
}
