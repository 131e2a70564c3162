package secretsencryption

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
)

// encrypt stores plaintext as the API server would with the file at path.
func encrypt(t *testing.T, path, etcdKey, plaintext string) []byte {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "test")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cfg.Transformers[schema.GroupResource{Resource: "secrets"}].TransformToStorage(ctx, []byte(plaintext), value.DefaultContext(etcdKey))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCheckStored(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, c Config) string {
		p := filepath.Join(dir, name)
		if _, err := Write(p, c); err != nil {
			t.Fatal(err)
		}
		return p
	}
	k1, _ := NewKey(t0)
	k2, _ := NewKey(t0.Add(time.Second))
	other := k1
	other.Secret = k2.Secret // same name, another key
	right := write("right.yaml", Fresh(k1))
	wrong := write("wrong.yaml", Fresh(other))
	rotated := write("rotated.yaml", Fresh(k2))
	both := write("both.yaml", WithNewKey(Fresh(k1), k2))
	stored := map[string][]byte{
		SecretsPrefix + "default/a": encrypt(t, right, SecretsPrefix+"default/a", "secret-a"),
		SecretsPrefix + "default/b": []byte("k8s\x00plain protobuf of a Secret written before encryption"),
	}
	for _, tc := range []struct {
		name, path string
		want       []string // nil: accepted
	}{
		{"the key it was written with", right, nil},
		{"old and new key during rotation", both, nil},
		{"same name, another key", wrong, []string{wrong, "default/a", k1.Name}},
		{"only a newer key", rotated, []string{rotated, "default/a", k1.Name}},
		{"no key file", filepath.Join(dir, "missing.yaml"), []string{"missing.yaml", "missing", "default/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStored(context.Background(), tc.path, stored)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	// Nothing encrypted in etcd: any file, or none, will do.
	plain := map[string][]byte{SecretsPrefix + "default/b": stored[SecretsPrefix+"default/b"]}
	if err := CheckStored(context.Background(), filepath.Join(dir, "missing.yaml"), plain); err != nil {
		t.Errorf("plaintext Secrets, no key file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Errorf("the check wrote a key file")
	}
}
