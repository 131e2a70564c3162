package containerd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
	"github.com/podvisor/podvisor/test/images"
)

// k3s's registries.yaml becomes one hosts.toml per registry: the
// endpoints in order with pull and resolve, TLS from the endpoint's
// configs, the registry itself as the server.
func TestRegistriesBecomeHostsFiles(t *testing.T) {
	r, err := ParseRegistries([]byte(`
mirrors:
  registry.k8s.io:
    endpoint: ["http://127.0.0.1:5000", "mirror.example.com/v2/k8s"]
  docker.io:
    endpoint: ["https://hub-mirror.example.com"]
  "*":
    endpoint: ["http://127.0.0.1:5000"]
configs:
  mirror.example.com:
    tls: {ca_file: /etc/ssl/mirror.crt, cert_file: /etc/ssl/c.crt, key_file: /etc/ssl/c.key}
  private.example.com:
    tls: {insecure_skip_verify: true}
    auth: {username: alice, password: s3cret}
`))
	if err != nil {
		t.Fatal(err)
	}
	files, err := r.HostsFiles()
	if err != nil {
		t.Fatal(err)
	}
	const header = "# Written by podvisor from registries.yaml at every start: edits are overwritten.\n"
	want := map[string]string{
		"registry.k8s.io": header + `server = "https://registry.k8s.io"

[host."http://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]

[host."https://mirror.example.com/v2/k8s"]
  capabilities = ["pull", "resolve"]
  override_path = true
  ca = "/etc/ssl/mirror.crt"
  client = [["/etc/ssl/c.crt", "/etc/ssl/c.key"]]
`,
		"docker.io": header + `server = "https://registry-1.docker.io"

[host."https://hub-mirror.example.com"]
  capabilities = ["pull", "resolve"]
`,
		"_default": header + `
[host."http://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]
`,
		// An endpoint's TLS holds when it is pulled from directly too.
		"mirror.example.com": header + `server = "https://mirror.example.com"
ca = "/etc/ssl/mirror.crt"
client = [["/etc/ssl/c.crt", "/etc/ssl/c.key"]]
`,
		"private.example.com": header + `server = "https://private.example.com"
skip_verify = true
`,
	}
	if len(files) != len(want) {
		t.Errorf("files for %d registries, want %d", len(files), len(want))
	}
	for dir, w := range want {
		if got := string(files[dir]); got != w {
			t.Errorf("%s/hosts.toml:\n%s\nwant:\n%s", dir, got, w)
		}
		var v map[string]any
		if err := toml.Unmarshal(files[dir], &v); err != nil {
			t.Errorf("%s/hosts.toml is not TOML: %v", dir, err)
		}
	}
	if a := r.auths(); len(a) != 1 || a[0].Host != "private.example.com" || a[0].Username != "alice" {
		t.Errorf("auths %+v", a)
	}
}

func TestRegistriesRefusesWhatItCannotHonour(t *testing.T) {
	for _, bad := range []string{
		"mirrors: {registry.k8s.io: {endpoints: [http://x]}}",                     // misspelt: k3s's key is endpoint
		"mirrors: {registry.k8s.io: {endpoint: [ftp://x]}}",                       // not http(s)
		"mirrors: {https://registry.k8s.io: {endpoint: [http://x]}}",              // a URL, not a host
		"mirrors: {docker.io: {endpoint: [http://x], rewrite: {a: b}}}",           // k3s's rewrites
		"configs: {\"*\": {tls: {insecure_skip_verify: true}}}",                   // a wildcard is a mirror's only
		"configs: {registry.k8s.io/path: {auth: {username: a}}}",                  // a path
		"mirrors: {registry.k8s.io: {endpoint: [\"http://u:p@127.0.0.1:5000\"]}}", // credentials go in configs
	} {
		if _, err := ParseRegistries([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	if r, err := ParseRegistries(nil); err != nil || len(r.Mirrors)+len(r.Configs) != 0 {
		t.Errorf("an empty file: %+v, %v", r, err)
	}
}

// The config names the hosts directory as the CRI's config_path (so the
// machine's /etc/containerd/certs.d is not read) and carries the
// credentials of registries.yaml.
func TestConfigHasTheRegistries(t *testing.T) {
	paths, err := PathsFor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(paths.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeConfig(config{Paths: paths, Snapshotter: "native", Auths: []registryAuth{
		{"127.0.0.1:5000", RegistryAuth{Username: "alice", Password: `s"3`}}}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(paths.Config)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Plugins map[string]struct {
			Registry struct {
				ConfigPath string `toml:"config_path"`
				Configs    map[string]struct {
					Auth struct{ Username, Password string } `toml:"auth"`
				} `toml:"configs"`
			} `toml:"registry"`
		} `toml:"plugins"`
	}
	if err := toml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	reg := c.Plugins["io.containerd.cri.v1.images"].Registry
	if reg.ConfigPath != paths.HostsDir {
		t.Errorf("config_path %q, want %q", reg.ConfigPath, paths.HostsDir)
	}
	if a := reg.Configs["127.0.0.1:5000"].Auth; a.Username != "alice" || a.Password != `s"3` {
		t.Errorf("auth %+v", a)
	}
}

// A pull is served by a mirror on 127.0.0.1 that registries.yaml names
// for a registry the node cannot reach; a registry without one is not;
// and the pulled image mounts as an image volume, read-only.
func TestPullThroughAMirrorAndMountTheImage(t *testing.T) {
	needRoot(t)
	reg := images.NewRegistry()
	defer reg.Close()
	img := imagebuild.Image{
		Names: []string{"mirrored.podvisor.test/team/files:1"},
		Files: []imagebuild.File{imagebuild.Regular("/data.json", 0o644, []byte(`{"image": "kitten.jpg"}`)),
			imagebuild.Dir("/etc", 0o755), imagebuild.Regular("/etc/os-release", 0o644, []byte("NAME=\"Alpine Linux\"\n"))},
	}
	v1img, err := img.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Push("mirrored.podvisor.test/team/files:1", v1img); err != nil {
		t.Fatal(err)
	}

	dataDir := t.TempDir()
	yaml := "mirrors:\n  mirrored.podvisor.test:\n    endpoint: [\"" + reg.URL() + "\"]\n"
	if err := os.WriteFile(filepath.Join(dataDir, RegistriesFile), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &testNode{t: t, o: testOptions(t, dataDir)}
	t.Cleanup(n.cleanUp)
	n.start()
	if b, err := os.ReadFile(filepath.Join(n.p.Paths().HostsDir, "mirrored.podvisor.test", "hosts.toml")); err != nil || !bytes.Contains(b, []byte(reg.URL())) {
		t.Fatalf("hosts.toml: %v\n%s", err, b)
	}

	ctx := context.Background()
	is := criImages(t, n.p)
	ref, err := is.PullImage(ctx, &runtimeapi.ImageSpec{Image: "mirrored.podvisor.test/team/files:1"}, nil, nil)
	if err != nil {
		t.Fatalf("pull through the mirror: %v (the mirror was asked %q)", err, reg.Requests())
	}
	if asked := reg.Requests(); !slices.Contains(asked, "HEAD /v2/team/files/manifests/1") && !slices.Contains(asked, "GET /v2/team/files/manifests/1") {
		t.Errorf("the mirror was asked %q, want the manifest of team/files:1", asked)
	}
	if _, err := is.PullImage(ctx, &runtimeapi.ImageSpec{Image: "unmirrored.podvisor.test/team/files:1"}, nil, nil); err == nil {
		t.Error("pulled from a registry that has no mirror and cannot be reached")
	}

	importBusybox(t, n)
	rs := criRuntime(t, n.p)
	pod, podCfg := runPod(t, rs, "imagevol")
	for _, tc := range []struct{ name, sub, cmd string }{
		{"whole", "", "cat /volume/data.json /volume/etc/os-release; touch /volume/x || echo read-only"},
		{"subpath", "etc", "cat /volume/os-release"},
	} {
		id, err := rs.CreateContainer(ctx, pod, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: tc.name},
			Image:    &runtimeapi.ImageSpec{Image: busyboxRef},
			Command:  []string{"sh", "-c", tc.cmd},
			LogPath:  tc.name + "/0.log",
			Mounts: []*runtimeapi.Mount{{ContainerPath: "/volume", Readonly: true,
				Image: &runtimeapi.ImageSpec{Image: ref}, ImageSubPath: tc.sub}},
		}, podCfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := rs.StartContainer(ctx, id); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cs := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_EXITED); cs.ExitCode != 0 {
			t.Errorf("%s: exit code %d", tc.name, cs.ExitCode)
		}
		log, _ := os.ReadFile(filepath.Join(podCfg.LogDirectory, tc.name, "0.log"))
		for _, want := range []string{"Alpine Linux"} {
			if !strings.Contains(string(log), want) {
				t.Errorf("%s: log lacks %q:\n%s", tc.name, want, log)
			}
		}
		if tc.name == "whole" && (!strings.Contains(string(log), "kitten.jpg") || !strings.Contains(string(log), "read-only")) {
			t.Errorf("%s: want data.json's content and a read-only volume:\n%s", tc.name, log)
		}
	}
}
