package containerd

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Registry mirrors and settings, k3s-style: DATA_DIR/registries.yaml, in
// k3s's format, becomes containerd's registry host configuration — one
// hosts.toml per registry under Paths.HostsDir, the CRI's
// registry.config_path — at every start of podvisor's containerd:
//
//	mirrors:
//	  registry.k8s.io:
//	    endpoint: ["http://127.0.0.1:5000"]
//	configs:
//	  "127.0.0.1:5000":
//	    tls: {ca_file: /etc/ssl/mirror.crt}
//	    auth: {username: u, password: p}
//
// A pull of registry.k8s.io/x then tries each endpoint in turn and the
// registry itself last. The mirror "*" applies to every registry without
// its own. TLS settings go into hosts.toml; credentials into the CRI's
// registry.configs, which containerd uses when a pull brings none of its
// own (a pod's pull secrets win).

// RegistriesFile is the name of the file in the data directory.
const RegistriesFile = "registries.yaml"

// Registries is k3s's registries.yaml.
type Registries struct {
	// Mirrors by registry host ("docker.io", "registry.k8s.io", "*").
	Mirrors map[string]Mirror `json:"mirrors,omitempty"`
	// Configs by registry or endpoint host ("127.0.0.1:5000").
	Configs map[string]RegistryConfig `json:"configs,omitempty"`
}

// Mirror lists the endpoints that serve a registry's images.
type Mirror struct {
	// Endpoints are URLs ("http://127.0.0.1:5000", "https://mirror.example");
	// one without a scheme is https. A path, if any, is the registry API's
	// root as it is (containerd's override_path); without one, /v2.
	Endpoints []string `json:"endpoint,omitempty"`
	// Rewrites are k3s's repository rewrites, which podvisor does not
	// implement: a registries.yaml that sets them is refused.
	Rewrites map[string]string `json:"rewrite,omitempty"`
}

// RegistryConfig is how to reach one registry host.
type RegistryConfig struct {
	Auth *RegistryAuth `json:"auth,omitempty"`
	TLS  *RegistryTLS  `json:"tls,omitempty"`
}

// RegistryAuth are credentials, as a docker config's.
type RegistryAuth struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
}

// RegistryTLS is the TLS of a registry host: files on the node.
type RegistryTLS struct {
	CAFile             string `json:"ca_file,omitempty"`
	CertFile           string `json:"cert_file,omitempty"`
	KeyFile            string `json:"key_file,omitempty"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify,omitempty"`
}

// ReadRegistries reads the registries.yaml of dataDir; none is the zero
// Registries. Unknown fields are errors, so that a misspelt setting is not
// silently without effect.
func ReadRegistries(dataDir string) (Registries, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, RegistriesFile))
	if errors.Is(err, os.ErrNotExist) {
		return Registries{}, nil
	}
	if err != nil {
		return Registries{}, err
	}
	return ParseRegistries(b)
}

// ParseRegistries parses and checks a registries.yaml.
func ParseRegistries(b []byte) (Registries, error) {
	var r Registries
	if err := yaml.UnmarshalStrict(b, &r); err != nil {
		return Registries{}, fmt.Errorf("%s: %w", RegistriesFile, err)
	}
	for host, m := range r.Mirrors {
		if err := checkRegistryHost(host, true); err != nil {
			return Registries{}, fmt.Errorf("%s: mirrors: %w", RegistriesFile, err)
		}
		if len(m.Rewrites) > 0 {
			return Registries{}, fmt.Errorf("%s: mirrors: %q: rewrite is not supported by podvisor", RegistriesFile, host)
		}
		for _, e := range m.Endpoints {
			if _, err := endpointURL(e); err != nil {
				return Registries{}, fmt.Errorf("%s: mirrors: %q: %w", RegistriesFile, host, err)
			}
		}
	}
	for host := range r.Configs {
		if err := checkRegistryHost(host, false); err != nil {
			return Registries{}, fmt.Errorf("%s: configs: %w", RegistriesFile, err)
		}
	}
	return r, nil
}

// checkRegistryHost: a registry is named by host[:port], as in an image
// reference; "*" (every registry) only as a mirror.
func checkRegistryHost(host string, wildcard bool) error {
	if host == "*" {
		if wildcard {
			return nil
		}
		return fmt.Errorf(`"*" names every registry only as a mirror`)
	}
	u, err := url.Parse("dummy://" + host)
	if err != nil || host == "" || u.Host != host || u.User != nil || strings.ContainsAny(host, "*?") {
		return fmt.Errorf("%q is not a registry host[:port]", host)
	}
	return nil
}

// endpointURL parses a mirror endpoint; https when it names no scheme.
func endpointURL(e string) (*url.URL, error) {
	if !strings.Contains(e, "://") {
		e = "https://" + e
	}
	u, err := url.Parse(e)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", e, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("endpoint %q is not an http(s)://host[:port][/path] URL", e)
	}
	return u, nil
}

// HostsFiles are the hosts.toml files of r, by directory under the hosts
// directory: one per mirrored registry ("_default" for "*") and one per
// registry with TLS settings but no mirror.
func (r Registries) HostsFiles() (map[string][]byte, error) {
	out := map[string][]byte{}
	for host, m := range r.Mirrors {
		b, err := r.hostsFile(host, m.Endpoints)
		if err != nil {
			return nil, err
		}
		out[hostsDirName(host)] = b
	}
	for host, c := range r.Configs {
		if _, mirrored := r.Mirrors[host]; mirrored || c.TLS == nil {
			continue
		}
		b, err := r.hostsFile(host, nil)
		if err != nil {
			return nil, err
		}
		out[hostsDirName(host)] = b
	}
	return out, nil
}

func hostsDirName(host string) string {
	if host == "*" {
		return "_default"
	}
	return host
}

// hostsFile is containerd's hosts.toml for registry host: each endpoint in
// order, pull and resolve only, then the registry itself (server).
func (r Registries) hostsFile(host string, endpoints []string) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by podvisor from %s at every start: edits are overwritten.\n", RegistriesFile)
	if host != "*" {
		server := "https://" + host
		if host == "docker.io" {
			server = "https://registry-1.docker.io" // as containerd's default for docker.io
		}
		fmt.Fprintf(&b, "server = %s\n", strconv.Quote(server))
		writeTLS(&b, "", r.Configs[host].TLS)
	}
	for _, e := range endpoints {
		u, err := endpointURL(e)
		if err != nil {
			return nil, err
		}
		override := u.Path != "" && u.Path != "/"
		if !override {
			u.Path = ""
		}
		fmt.Fprintf(&b, "\n[host.%s]\n  capabilities = [\"pull\", \"resolve\"]\n", strconv.Quote(u.String()))
		if override {
			b.WriteString("  override_path = true\n")
		}
		writeTLS(&b, "  ", r.Configs[u.Host].TLS)
	}
	return b.Bytes(), nil
}

func writeTLS(b *bytes.Buffer, indent string, t *RegistryTLS) {
	if t == nil {
		return
	}
	if t.CAFile != "" {
		fmt.Fprintf(b, "%sca = %s\n", indent, strconv.Quote(t.CAFile))
	}
	if t.CertFile != "" && t.KeyFile != "" {
		fmt.Fprintf(b, "%sclient = [[%s, %s]]\n", indent, strconv.Quote(t.CertFile), strconv.Quote(t.KeyFile))
	} else if t.CertFile != "" {
		fmt.Fprintf(b, "%sclient = %s\n", indent, strconv.Quote(t.CertFile))
	}
	if t.InsecureSkipVerify {
		fmt.Fprintf(b, "%sskip_verify = true\n", indent)
	}
}

// registryAuth is one registry host's credentials, for the CRI config.
type registryAuth struct {
	Host string
	RegistryAuth
}

// auths are the credentials of r, sorted by host.
func (r Registries) auths() []registryAuth {
	var out []registryAuth
	for host, c := range r.Configs {
		if c.Auth != nil {
			out = append(out, registryAuth{host, *c.Auth})
		}
	}
	slices.SortFunc(out, func(a, b registryAuth) int { return strings.Compare(a.Host, b.Host) })
	return out
}

// writeHostsDir replaces the hosts directory's content with r's files, so
// that a registry removed from registries.yaml loses its mirrors.
func writeHostsDir(dir string, r Registries) error {
	files, err := r.HostsFiles()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(dir, name, "hosts.toml"), b); err != nil {
			return err
		}
	}
	return nil
}
