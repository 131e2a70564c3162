package runtimetest

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Images is an in-memory runtime.Images for the agent's tests: the node's
// store, and a registry that pulls fetch from.
type Images struct {
	mu       sync.Mutex
	local    map[string]runtime.Image // by every name it has, and by ID
	registry map[string]registryEntry
	pulls    []Pull
	// OnPull, when set, runs inside every PullImage (a test steps its clock
	// there to give the pull a duration).
	OnPull func(ref string)
	// Fs is what ImageFsInfo reports.
	Fs runtime.ImageFsUsage
}

// Pull is one PullImage call.
type Pull struct {
	Ref  string
	Auth *runtime.RegistryAuth
}

type registryEntry struct {
	img  runtime.Image
	auth *runtime.RegistryAuth // required credentials; nil: anonymous
}

var _ runtime.Images = (*Images)(nil)

// NewImages returns an empty store and registry.
func NewImages() *Images {
	return &Images{local: map[string]runtime.Image{}, registry: map[string]registryEntry{}}
}

// AddLocal puts img on the node under ref.
func (f *Images) AddLocal(ref string, img runtime.Image) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.local[ref], f.local[img.ID] = img, img
}

// AddRemote makes ref pullable, only with auth when auth is not nil.
func (f *Images) AddRemote(ref string, img runtime.Image, auth *runtime.RegistryAuth) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registry[ref] = registryEntry{img, auth}
}

// Pulls returns the PullImage calls so far.
func (f *Images) Pulls() []Pull {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pulls)
}

func (f *Images) ImageStatus(_ context.Context, ref string) (runtime.Image, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	img, ok := f.local[ref]
	return img, ok, nil
}

// PullImage fetches ref from the registry: ErrNotFound for an image it does
// not have, ErrInvalid for credentials it does not accept.
func (f *Images) PullImage(_ context.Context, ref string, auth *runtime.RegistryAuth) (string, error) {
	f.mu.Lock()
	var a *runtime.RegistryAuth
	if auth != nil {
		c := *auth
		a = &c
	}
	f.pulls = append(f.pulls, Pull{ref, a})
	onPull := f.OnPull
	f.mu.Unlock()
	if onPull != nil {
		onPull(ref)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.registry[ref]
	switch {
	case !ok:
		return "", fmt.Errorf("pull image %s: failed to resolve reference %q: not found: %w", ref, ref, runtime.ErrNotFound)
	case e.auth != nil && (auth == nil || *auth != *e.auth):
		who := "anonymous"
		if auth != nil {
			who = auth.Username
		}
		return "", fmt.Errorf("pull image %s: pull access denied for %s: %w", ref, who, runtime.ErrInvalid)
	}
	f.local[ref], f.local[e.img.ID] = e.img, e.img
	return e.img.ID, nil
}

func (f *Images) ListImages(context.Context) ([]runtime.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[string]bool{}
	var out []runtime.Image
	for _, img := range f.local {
		if !seen[img.ID] {
			seen[img.ID] = true
			out = append(out, img)
		}
	}
	return out, nil
}

func (f *Images) RemoveImage(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	img, ok := f.local[ref]
	if !ok {
		return fmt.Errorf("remove image %s: %w", ref, runtime.ErrNotFound)
	}
	for k, v := range f.local {
		if v.ID == img.ID {
			delete(f.local, k)
		}
	}
	return nil
}

func (f *Images) ImportImages(context.Context, io.Reader) ([]string, error) {
	return nil, fmt.Errorf("import images: %w", runtime.ErrInvalid)
}

// ImageFsInfo is Fs; a Fs without Mountpoint is ErrUnavailable, as a
// runtime that names no image filesystem.
func (f *Images) ImageFsInfo(context.Context) (runtime.ImageFsUsage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Fs.Mountpoint == "" {
		return runtime.ImageFsUsage{}, fmt.Errorf("image filesystem info: %w", runtime.ErrUnavailable)
	}
	return f.Fs, nil
}
