package images

import (
	"encoding/base64"
	"fmt"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

func dockerConfigJSON(auths string) v1.Secret {
	return v1.Secret{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":` + auths + `}`)}}
}

func dockercfg(cfg string) v1.Secret {
	return v1.Secret{Type: v1.SecretTypeDockercfg, Data: map[string][]byte{v1.DockerConfigKey: []byte(cfg)}}
}

func user(name string) runtime.RegistryAuth {
	return runtime.RegistryAuth{Username: name, Password: "pw-" + name}
}

// auths drops the secrets the credentials came from.
func auths(ts []TrackedAuth) []runtime.RegistryAuth {
	var out []runtime.RegistryAuth
	for _, t := range ts {
		out = append(out, t.RegistryAuth)
	}
	return out
}

func entry(name string) string {
	return fmt.Sprintf(`{"username":%q,"password":"pw-%s"}`, name, name)
}

func TestKeyringMatchesAsUpstream(t *testing.T) {
	secrets := []v1.Secret{
		dockerConfigJSON(`{
			"https://index.docker.io/v1/": ` + entry("hub") + `,
			"quay.io": ` + entry("quay") + `,
			"quay.io/team": ` + entry("team") + `,
			"*.example.com": ` + entry("wild") + `,
			"registry.local:5000": ` + entry("port") + `,
			"https://private.io/v2/": ` + entry("v2") + `
		}`),
		dockercfg(`{"quay.io": ` + entry("quay2") + `}`),
		{Type: v1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("not a config")}},
	}
	k, err := KeyringFromSecrets(secrets)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		repository string
		want       []runtime.RegistryAuth
	}{
		// Docker Hub's credentials, under index.docker.io, for Docker Hub images.
		{"docker.io/library/busybox", []runtime.RegistryAuth{user("hub")}},
		// The most specific location first, then the host; a host's entries
		// in the order of the secrets.
		{"quay.io/team/app", []runtime.RegistryAuth{user("team"), user("quay"), user("quay2")}},
		{"quay.io/other/app", []runtime.RegistryAuth{user("quay"), user("quay2")}},
		// A path is a string prefix: quay.io/team also matches quay.io/teamwork.
		{"quay.io/teamwork/app", []runtime.RegistryAuth{user("team"), user("quay"), user("quay2")}},
		// A wildcard stands for one label.
		{"r.example.com/app", []runtime.RegistryAuth{user("wild")}},
		{"a.b.example.com/app", nil},
		{"example.com/app", nil},
		// Ports must be equal.
		{"registry.local:5000/app", []runtime.RegistryAuth{user("port")}},
		{"registry.local/app", nil},
		// /v2/ is the host itself.
		{"private.io/app", []runtime.RegistryAuth{user("v2")}},
		{"gcr.io/project/app", nil},
	} {
		if got := auths(k.Lookup(tc.repository)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Lookup(%q) = %v, want %v", tc.repository, got, tc.want)
		}
	}
}

func TestKeyringDecodesAuth(t *testing.T) {
	padded := base64.StdEncoding.EncodeToString([]byte("alice:s3cr:et"))
	unpadded := base64.RawStdEncoding.EncodeToString([]byte("bob:pw"))
	k, err := KeyringFromSecrets([]v1.Secret{dockerConfigJSON(fmt.Sprintf(
		`{"a.io": {"auth": %q, "username": "ignored"}, "b.io": {"auth": %q}}`, padded, unpadded))})
	if err != nil {
		t.Fatal(err)
	}
	if got := auths(k.Lookup("a.io/x")); !reflect.DeepEqual(got, []runtime.RegistryAuth{{Username: "alice", Password: "s3cr:et"}}) {
		t.Errorf("a.io: %v", got)
	}
	if got := auths(k.Lookup("b.io/x")); !reflect.DeepEqual(got, []runtime.RegistryAuth{{Username: "bob", Password: "pw"}}) {
		t.Errorf("b.io: %v", got)
	}
}

// A secret that does not parse fails the lookup, as upstream's
// MakeDockerKeyring; a secret of the right type without its key, or of
// another type, is ignored.
func TestKeyringRejectsMalformedSecrets(t *testing.T) {
	for name, s := range map[string]v1.Secret{
		"bad json":      dockerConfigJSON(`{`),
		"bad dockercfg": dockercfg(`[]`),
		"auth not b64":  dockerConfigJSON(`{"a.io": {"auth": "%%%"}}`),
		"auth no colon": dockerConfigJSON(fmt.Sprintf(`{"a.io": {"auth": %q}}`, base64.StdEncoding.EncodeToString([]byte("nocolon")))),
	} {
		if _, err := KeyringFromSecrets([]v1.Secret{s}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	k, err := KeyringFromSecrets([]v1.Secret{
		{Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{v1.DockerConfigKey: []byte("{")}},
		{Type: v1.SecretTypeOpaque, Data: map[string][]byte{v1.DockerConfigJsonKey: []byte("{")}},
	})
	if err != nil || len(k.Lookup("docker.io/library/busybox")) != 0 {
		t.Errorf("ignored secrets: %v %v", k, err)
	}
}

func TestIsDockerHub(t *testing.T) {
	for image, want := range map[string]bool{
		"busybox":                   true,
		"library/busybox":           true,
		"docker.io/library/busybox": true,
		"index.docker.io/user/app":  true,
		"quay.io/app":               false,
		"localhost:5000/app":        false,
		"/app":                      false,
	} {
		if got := isDockerHub(image); got != want {
			t.Errorf("isDockerHub(%q) = %v, want %v", image, got, want)
		}
	}
}
