// Package images builds the images podvisor's tests run, offline: busybox from
// Debian's busybox-static, the testserver program of this directory, and the
// pause image. Each is written as a tar that `ctr images import`, containerd's
// client.Import and `podvisor image import` take.
//
// Tests call Build; people and CI call `go run ./test/images/build -o DIR`.
package images

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
	"github.com/podvisor/podvisor/internal/runtime/pause"
)

// Image references, as a pod spec names them.
const (
	BusyboxImage           = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	BusyboxLatestImage     = "docker.io/library/busybox:latest"
	TestserverImage        = "podvisor.test/testserver:1"
	TestserverSIGUSR1Image = "podvisor.test/testserver:1-sigusr1"
	TestserverNonRootImage = "podvisor.test/testserver:1-nonroot"
	PauseImage             = pause.ImageName
)

// recipes maps a recipe name to the function describing its image.
var recipes = map[string]func() (imagebuild.Image, error){
	"busybox":            busybox,
	"testserver":         func() (imagebuild.Image, error) { return testserver(TestserverImage, nil) },
	"testserver-sigusr1": func() (imagebuild.Image, error) { return testserver(TestserverSIGUSR1Image, withStopSignal) },
	"testserver-nonroot": func() (imagebuild.Image, error) { return testserver(TestserverNonRootImage, withNonRootUser) },
	"pause":              pause.Image,
}

// Names lists the recipes, sorted.
func Names() []string {
	names := make([]string, 0, len(recipes))
	for n := range recipes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Image describes the image of the named recipe.
func Image(name string) (imagebuild.Image, error) {
	recipe, ok := recipes[name]
	if !ok {
		return imagebuild.Image{}, fmt.Errorf("no image recipe %q (have %v)", name, Names())
	}
	return recipe()
}

// WriteTar writes the named image into dir as NAME.tar in format f and
// returns the file's path.
func WriteTar(dir, name string, f imagebuild.Format) (string, error) {
	im, err := Image(name)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name+".tar")
	if err := im.WriteArchiveFile(p, f); err != nil {
		return "", err
	}
	return p, nil
}

var built sync.Map // recipe name → func() (string, error), one build each

// Build returns the path of the named image's docker-archive tar. It is built
// once per test binary, whichever test asks first, and kept in
// $TMPDIR/podvisor-test-images under the image ID, so later runs and
// other test binaries reuse the same file. Nothing there is ever stale: a
// changed image has another ID.
func Build(t testing.TB, name string) string {
	t.Helper()
	p, err := once(&built, name, func() (string, error) { return cachedTar(name) })
	if err != nil {
		t.Fatalf("test image %s: %v", name, err)
	}
	return p
}

func cachedTar(name string) (string, error) {
	im, err := Image(name)
	if err != nil {
		return "", err
	}
	id, err := im.ID()
	if err != nil {
		return "", err
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	// "sha256:" and 16 hex digits tell images apart well enough for a cache.
	p := filepath.Join(dir, fmt.Sprintf("%s-%s.tar", name, id[len("sha256:"):][:16]))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return p, im.WriteArchiveFile(p, imagebuild.Docker)
}

// Program returns the path of a host copy of the named program of this
// directory ("testserver"), for tests that run it without an image (the
// process runtime). It is kept beside the image tars under its content's
// hash, so later runs reuse it.
func Program(t testing.TB, name string) string {
	t.Helper()
	p, err := once(&written, name, func() (string, error) { return cachedProgram(name) })
	if err != nil {
		t.Fatalf("test program %s: %v", name, err)
	}
	return p
}

var written sync.Map // program name → func() (string, error), one write each

func cachedProgram(name string) (string, error) {
	bin, err := program(name)
	if err != nil {
		return "", err
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, fmt.Sprintf("%s-%x", name, sha256.Sum256(bin))[:len(name)+1+16])
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	// Written under another name first: a half-written file is never found.
	tmp := p + fmt.Sprintf(".%d", os.Getpid())
	if err := os.WriteFile(tmp, bin, 0o755); err != nil {
		return "", err
	}
	return p, os.Rename(tmp, p)
}

// cacheDir is where built images and programs are kept across runs.
func cacheDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "podvisor-test-images")
	return dir, os.MkdirAll(dir, 0o755)
}

// once calls make the first time key is asked for in m and returns what it
// returned then to every caller.
func once[T any](m *sync.Map, key string, make func() (T, error)) (T, error) {
	f, _ := m.LoadOrStore(key, sync.OnceValues(make))
	return f.(func() (T, error))()
}
