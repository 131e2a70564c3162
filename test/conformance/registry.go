package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The specs that pull with policy Always (ImageVolume) need a registry:
// the runner serves every image it built from a registry of its own on
// 127.0.0.1 (go-containerregistry's, blobs on disk), and podvisor's
// registries.yaml points registry.k8s.io at it.

// localRegistry is the runner's registry.
type localRegistry struct {
	url string // http://HOST:PORT
	srv *http.Server
}

// startRegistry serves a registry on a free port of host (an address of
// this machine: 127.0.0.1, or the lab's bridge where the nodes of -nodes
// reach it), its blobs in dir, until stop.
func startRegistry(dir, host string) (*localRegistry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)))
	r := &localRegistry{url: "http://" + l.Addr().String(), srv: &http.Server{Handler: h}}
	go r.srv.Serve(l)
	return r, nil
}

func (r *localRegistry) stop() { r.srv.Close() }

// registriesYAML is podvisor's registries.yaml (k3s's format): pulls of
// registry.k8s.io go to the runner's registry.
func (r *localRegistry) registriesYAML() []byte {
	return []byte("mirrors:\n  registry.k8s.io:\n    endpoint: [\"" + r.url + "\"]\n")
}

// pushTars pushes every image of the docker-archive tars under each of
// its names, as the registry it names would serve it.
func (r *localRegistry) pushTars(tars []string) error {
	for _, p := range tars {
		m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(p) })
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
		for _, desc := range m {
			for _, ref := range desc.RepoTags {
				tag, err := name.NewTag(ref)
				if err != nil {
					return err
				}
				img, err := tarball.ImageFromPath(p, &tag)
				if err != nil {
					return fmt.Errorf("%s: %w", ref, err)
				}
				if err := r.push(tag, img); err != nil {
					return fmt.Errorf("pushing %s: %w", ref, err)
				}
			}
		}
	}
	return nil
}

// push stores img under tag's repository and tag on the runner's registry.
func (r *localRegistry) push(tag name.Tag, img v1.Image) error {
	dst, err := name.NewTag(strings.TrimPrefix(r.url, "http://")+"/"+tag.RepositoryStr()+":"+tag.TagStr(), name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(dst, img)
}
