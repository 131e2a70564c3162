// Package imagetar builds single-layer container images from files, offline,
// and writes them as the archives `podvisor image import` takes: a
// docker-archive (what `docker save` writes) or an OCI-layout tar. podvisor
// builds its pause image this way, and tests their images (a static busybox,
// a static Go binary) — there is no registry to pull from.
package imagetar

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of the image's file system.
type File struct {
	Path string      // absolute in the image: /bin/busybox
	Mode fs.FileMode // permission bits, plus fs.ModeDir or fs.ModeSymlink
	Data []byte      // a regular file's content
	Link string      // a symlink's target
}

// Image is an image to build: its name, files and the config a container
// runtime reads (entrypoint, cmd, env, ...).
type Image struct {
	Ref        string // e.g. registry.k8s.io/pause:3.10.2
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
	StopSignal string
	Labels     map[string]string
}

// WriteDocker writes img as a docker-archive.
func WriteDocker(w io.Writer, img Image) error {
	ref, i, err := build(img)
	if err != nil {
		return err
	}
	return tarball.Write(ref, i, w)
}

// WriteOCI writes img as an OCI-layout tar whose manifest carries img.Ref as
// its org.opencontainers.image.ref.name.
func WriteOCI(w io.Writer, img Image) error {
	_, i, err := build(img)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "imagetar-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(i, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": img.Ref})); err != nil {
		return err
	}
	return tarDir(w, dir)
}

func build(img Image) (name.Reference, v1.Image, error) {
	ref, err := name.ParseReference(img.Ref)
	if err != nil {
		return nil, nil, fmt.Errorf("image name %q: %w", img.Ref, err)
	}
	layerTar, err := layerTar(img.Files)
	if err != nil {
		return nil, nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, nil, err
	}
	i, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, nil, err
	}
	cf, err := i.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = runtime.GOOS, runtime.GOARCH
	cf.Config = v1.Config{
		Entrypoint: img.Entrypoint,
		Cmd:        img.Cmd,
		Env:        img.Env,
		WorkingDir: img.WorkingDir,
		User:       img.User,
		StopSignal: img.StopSignal,
		Labels:     img.Labels,
	}
	i, err = mutate.ConfigFile(i, cf)
	return ref, i, err
}

// layerTar is the layer's tar, with an entry for every parent directory.
func layerTar(files []File) ([]byte, error) {
	dirs := map[string]bool{}
	var entries []File
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean("/"+f.Path), "/")
		if p == "" {
			return nil, fmt.Errorf("file %q: not a path in the image", f.Path)
		}
		f.Path = p
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if !dirs[d] {
				dirs[d] = true
				entries = append(entries, File{Path: d, Mode: fs.ModeDir | 0o755})
			}
		}
		if f.Mode.IsDir() {
			if dirs[p] {
				continue
			}
			dirs[p] = true
		}
		entries = append(entries, f)
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range entries {
		h := &tar.Header{Name: f.Path, Mode: int64(f.Mode.Perm()), Format: tar.FormatPAX}
		switch {
		case f.Mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, f.Path+"/"
		case f.Mode&fs.ModeSymlink != 0:
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
			h.Mode = 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// tarDir writes the regular files and directories under dir as a tar.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
