package images

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Keyring holds the registry credentials of a pod's pull secrets, indexed
// by registry location as upstream's keyring (kubernetes/kubernetes
// pkg/credentialprovider/keyring.go BasicDockerKeyring and
// pkg/credentialprovider/secrets/secrets.go).
type Keyring struct {
	index []string // locations, most specific first
	creds map[string][]TrackedAuth
}

// TrackedAuth is a credential with the pull secret it came from, for the
// pulled-image credential check.
type TrackedAuth struct {
	runtime.RegistryAuth
	Secret SecretCredential
}

// dockerConfigEntry is one registry of a docker config; "auth" is
// base64(user:password) and wins over username and password.
type dockerConfigEntry struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Auth     string `json:"auth,omitempty"`
}

// KeyringFromSecrets reads the secrets of type kubernetes.io/dockerconfigjson
// (key .dockerconfigjson, {"auths": {…}}) and kubernetes.io/dockercfg (key
// .dockercfg, the registries at the top); other secrets are ignored. A
// secret that does not parse fails the whole lookup, as upstream.
func KeyringFromSecrets(secrets []v1.Secret) (*Keyring, error) {
	k := &Keyring{creds: map[string][]TrackedAuth{}}
	for _, s := range secrets {
		var cfg map[string]dockerConfigEntry
		if b := s.Data[v1.DockerConfigJsonKey]; s.Type == v1.SecretTypeDockerConfigJson && len(b) > 0 {
			var doc struct {
				Auths map[string]dockerConfigEntry `json:"auths"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				return nil, err
			}
			cfg = doc.Auths
		} else if b := s.Data[v1.DockerConfigKey]; s.Type == v1.SecretTypeDockercfg && len(b) > 0 {
			if err := json.Unmarshal(b, &cfg); err != nil {
				return nil, err
			}
		}
		if err := k.add(cfg, SecretCredential{UID: string(s.UID), Namespace: s.Namespace, Name: s.Name}); err != nil {
			return nil, err
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(k.index)))
	return k, nil
}

// add indexes the registries of one docker config, in the order of their
// locations (a map has none; upstream's is its map order).
func (k *Keyring) add(cfg map[string]dockerConfigEntry, source SecretCredential) error {
	for _, loc := range slices.Sorted(maps.Keys(cfg)) {
		e := cfg[loc]
		auth := runtime.RegistryAuth{Username: e.Username, Password: e.Password}
		if e.Auth != "" {
			user, pass, err := decodeAuth(e.Auth)
			if err != nil {
				return err
			}
			auth.Username, auth.Password = user, pass
		}
		key, ok := locationKey(loc)
		if !ok {
			continue // upstream logs the entry as invalid and ignores it
		}
		if _, seen := k.creds[key]; !seen {
			k.index = append(k.index, key)
		}
		src := source
		src.Hash = credentialHash(auth)
		k.creds[key] = append(k.creds[key], TrackedAuth{RegistryAuth: auth, Secret: src})
	}
	return nil
}

// decodeAuth splits base64(user:password), padded or not.
func decodeAuth(field string) (user, password string, err error) {
	enc := base64.RawStdEncoding
	if strings.HasSuffix(strings.TrimSpace(field), "=") {
		enc = base64.StdEncoding
	}
	b, err := enc.DecodeString(field)
	if err != nil {
		return "", "", err
	}
	user, password, ok := strings.Cut(string(b), ":")
	if !ok {
		return "", "", errors.New("unable to parse auth field, must be formatted as base64(username:password)")
	}
	return user, password, nil
}

// locationKey is a config location as host[/path]: the scheme dropped and
// a /v1/ or /v2/ API prefix taken for the host itself, as the docker client.
func locationKey(loc string) (string, bool) {
	if !strings.HasPrefix(loc, "https://") && !strings.HasPrefix(loc, "http://") {
		loc = "https://" + loc
	}
	u, err := url.Parse(loc)
	if err != nil {
		return "", false
	}
	path := u.Path
	if strings.HasPrefix(path, "/v2/") || strings.HasPrefix(path, "/v1/") {
		path = path[3:]
	}
	if path == "" || path == "/" {
		return u.Host, true
	}
	return u.Host + path, true
}

// defaultRegistryKey is where a docker config keeps Docker Hub's
// credentials ("https://index.docker.io/v1/").
const defaultRegistryKey = "index.docker.io"

// Lookup returns the credentials for repository (a fully qualified
// repository, Name.Repository) to try in turn: those of every matching
// location, most specific first; else Docker Hub's for a Docker Hub image.
func (k *Keyring) Lookup(repository string) []TrackedAuth {
	var out []TrackedAuth
	for _, key := range k.index {
		if locationMatches(key, repository) {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) == 0 && isDockerHub(repository) {
		out = append(out, k.creds[defaultRegistryKey]...)
	}
	return out
}

// locationMatches: glob's host matches target's label by label (with
// path.Match wildcards, "*.example.com"), the ports are equal, and glob's
// path is a prefix of target's — a plain string prefix, so "quay.io/foo"
// also matches "quay.io/foobar", as upstream's URLsMatch.
func locationMatches(glob, target string) bool {
	g, err := url.Parse("https://" + glob)
	if err != nil {
		return false
	}
	t, err := url.Parse("https://" + target)
	if err != nil {
		return false
	}
	gParts, gPort := splitHost(g.Host)
	tParts, tPort := splitHost(t.Host)
	if gPort != tPort || len(gParts) != len(tParts) || !strings.HasPrefix(t.Path, g.Path) {
		return false
	}
	for i := range gParts {
		if ok, err := filepath.Match(gParts[i], tParts[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func splitHost(hostport string) (labels []string, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	return strings.Split(host, "."), port
}

// isDockerHub: the image's first component is docker.io or
// index.docker.io, or is not a host at all (no "." or ":"), as the docker
// client decides.
func isDockerHub(image string) bool {
	first, _, found := strings.Cut(image, "/")
	switch {
	case first == "":
		return false
	case !found, first == "docker.io", first == "index.docker.io":
		return true
	}
	return !strings.ContainsAny(first, ".:")
}
