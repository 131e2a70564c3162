// Package imagebuild makes OCI images from files in memory, without a
// registry, a daemon or a Dockerfile: podvisor builds its pause image this way
// on a machine that cannot pull one, and tests build their images the same way.
//
// The output is deterministic: every timestamp is Epoch and entries are
// sorted, so the same Image gives the same image ID and the same tar bytes.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Epoch is the time of every file, history entry and the image itself, as
// reproducible builds do with SOURCE_DATE_EPOCH=0.
var Epoch = time.Unix(0, 0).UTC()

// Image is what an image is made of: one layer of Files, a Config and the
// Names it is tagged with.
type Image struct {
	// Names are references with a tag, such as "registry.k8s.io/pause:3.10.2".
	// Short names are normalised as containerd does ("busybox" is
	// "docker.io/library/busybox:latest").
	Names  []string
	Config Config
	// Files make the image's only layer. Parent directories that are not
	// listed are added with mode 0755, owned by root.
	Files []File
	// Architecture is the GOARCH the files run on; empty means this machine's.
	Architecture string
}

// Config is the part of the OCI image config a container runtime reads.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
	StopSignal string
	// ExposedPorts are "port/proto", such as "8080/tcp".
	ExposedPorts []string
	Labels       map[string]string
}

// File is one entry of the layer. Mode carries the type (fs.ModeDir,
// fs.ModeSymlink, none for a regular file), the permission bits and
// fs.ModeSetuid, fs.ModeSetgid and fs.ModeSticky.
type File struct {
	Path     string // absolute path in the image
	Mode     fs.FileMode
	Data     []byte // content of a regular file
	Target   string // target of a symlink
	UID, GID int
}

// Dir, Symlink and Regular are shorthands for the three kinds of File.
func Dir(p string, perm fs.FileMode) File { return File{Path: p, Mode: fs.ModeDir | perm} }

// Symlink is a File at p pointing to target.
func Symlink(p, target string) File {
	return File{Path: p, Mode: fs.ModeSymlink | 0o777, Target: target}
}

// Regular is a File at p with data and mode.
func Regular(p string, mode fs.FileMode, data []byte) File {
	return File{Path: p, Mode: mode, Data: data}
}

// NormalizeName returns name as containerd stores it: domain, path and tag
// explicit ("busybox" → "docker.io/library/busybox:latest"). A digest is refused:
// a built image has no registry manifest to pin.
func NormalizeName(name string) (string, error) {
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", name, err)
	}
	if _, ok := named.(reference.Digested); ok {
		return "", fmt.Errorf("image name %q: a built image cannot be named by digest", name)
	}
	return reference.TagNameOnly(named).String(), nil
}

// Build returns the image in go-containerregistry's form, with OCI media types.
func (im Image) Build() (v1.Image, error) {
	if len(im.Names) == 0 {
		return nil, fmt.Errorf("image has no name")
	}
	layerTar, err := im.layer()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("image %s: layer: %w", im.Names[0], err)
	}
	arch := im.Architecture
	if arch == "" {
		arch = runtime.GOARCH
	}
	cfg := &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: Epoch},
		Config:       im.Config.v1(),
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		History:   v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "podvisor imagebuild"},
		MediaType: types.OCILayer,
	})
}

// ID returns the image ID, the digest of its config ("sha256:…"): what
// containerd and CRI report as the image's ID.
func (im Image) ID() (string, error) {
	img, err := im.Build()
	if err != nil {
		return "", err
	}
	h, err := img.ConfigName()
	if err != nil {
		return "", err
	}
	return h.String(), nil
}

func (c Config) v1() v1.Config {
	out := v1.Config{
		Entrypoint: c.Entrypoint,
		Cmd:        c.Cmd,
		Env:        c.Env,
		WorkingDir: c.WorkingDir,
		User:       c.User,
		StopSignal: c.StopSignal,
		Labels:     c.Labels,
	}
	if len(c.ExposedPorts) > 0 {
		out.ExposedPorts = map[string]struct{}{}
		for _, p := range c.ExposedPorts {
			out.ExposedPorts[p] = struct{}{}
		}
	}
	return out
}

// layer returns the uncompressed layer tar: the files sorted by path, with
// the parent directories nobody listed.
func (im Image) layer() ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range im.Files {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			return nil, fmt.Errorf("file %q: the root is not a file", f.Path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("file %q is listed twice", p)
		}
		f.Path = p
		byPath[p] = f
	}
	for p := range byPath {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = Dir(d, 0o755)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		hdr, err := f.header()
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("file %s: %w", p, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, fmt.Errorf("file %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (f File) header() (*tar.Header, error) {
	mode := int64(f.Mode.Perm())
	if f.Mode&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if f.Mode&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if f.Mode&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(f.Path, "/"),
		Mode:    mode,
		Uid:     f.UID,
		Gid:     f.GID,
		ModTime: Epoch,
	}
	switch {
	case f.Mode.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case f.Mode&fs.ModeSymlink != 0:
		if f.Target == "" {
			return nil, fmt.Errorf("symlink %s has no target", f.Path)
		}
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = f.Target
	case f.Mode.IsRegular():
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(f.Data))
	default:
		return nil, fmt.Errorf("file %s: mode %v is not a directory, symlink or regular file", f.Path, f.Mode)
	}
	return hdr, nil
}
