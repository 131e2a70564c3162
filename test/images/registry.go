package images

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Registry is an in-memory registry on 127.0.0.1 (go-containerregistry's),
// for tests that pull: a mirror that registries.yaml points a registry at.
type Registry struct {
	srv *httptest.Server

	mu     sync.Mutex
	served []string // "GET /v2/…" requests, in order
	user   string   // with pass: every request needs this basic auth
	pass   string
}

// NewRegistry starts an empty registry; Close stops it.
func NewRegistry() *Registry {
	r := &Registry{}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.served = append(r.served, req.Method+" "+req.URL.Path)
		wantUser, wantPass := r.user, r.pass
		r.mu.Unlock()
		if user, pass, _ := req.BasicAuth(); wantUser != "" && (user != wantUser || pass != wantPass) {
			w.Header().Set("WWW-Authenticate", `Basic realm="podvisor-test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, req)
	}))
	return r
}

// RequireBasicAuth makes every later request need these credentials, as a
// private registry (401 with a Basic challenge otherwise); Push sends them.
func (r *Registry) RequireBasicAuth(user, pass string) {
	r.mu.Lock()
	r.user, r.pass = user, pass
	r.mu.Unlock()
}

// URL is the registry's endpoint, http://127.0.0.1:PORT.
func (r *Registry) URL() string { return r.srv.URL }

// Host is the registry's host:port.
func (r *Registry) Host() string { return strings.TrimPrefix(r.srv.URL, "http://") }

// Close stops the registry.
func (r *Registry) Close() { r.srv.Close() }

// Requests are the requests served so far, as "METHOD /path".
func (r *Registry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.served...)
}

// Push stores img as ref's repository and tag ("registry.k8s.io/x/y:1" is
// stored as x/y:1: the registry serves whatever it mirrors).
func (r *Registry) Push(ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	repo := tag.RepositoryStr()
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if err := r.put(http.MethodPost, "/v2/"+repo+"/blobs/uploads/?digest="+d.String(), "", b); err != nil {
			return err
		}
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	if err := r.put(http.MethodPost, "/v2/"+repo+"/blobs/uploads/?digest="+cfgName.String(), "", cfg); err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	return r.put(http.MethodPut, "/v2/"+repo+"/manifests/"+tag.TagStr(), string(mt), manifest)
}

// put sends one upload (a monolithic blob POST or a manifest PUT).
func (r *Registry) put(method, path, contentType string, body []byte) error {
	req, err := http.NewRequest(method, r.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	r.mu.Lock()
	if r.user != "" {
		req.SetBasicAuth(r.user, r.pass)
	}
	r.mu.Unlock()
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("registry: %s %s: %s: %s", method, path, resp.Status, msg)
	}
	return nil
}
