package images

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

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
// stored as x/y:1: the registry serves whatever it mirrors), with the
// credentials RequireBasicAuth set.
func (r *Registry) Push(ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	dst, err := name.NewTag(r.Host()+"/"+tag.RepositoryStr()+":"+tag.TagStr(), name.Insecure)
	if err != nil {
		return err
	}
	var auth authn.Authenticator = authn.Anonymous
	r.mu.Lock()
	if r.user != "" {
		auth = &authn.Basic{Username: r.user, Password: r.pass}
	}
	r.mu.Unlock()
	return remote.Write(dst, img, remote.WithAuth(auth), remote.WithTransport(r.srv.Client().Transport))
}
