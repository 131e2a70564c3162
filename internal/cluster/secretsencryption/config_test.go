package secretsencryption

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 28, 15, 0, 0, 0, time.UTC)

func TestParseRefusesDamagedFiles(t *testing.T) {
	good, err := NewKey(t0)
	if err != nil {
		t.Fatal(err)
	}
	valid, err := Marshal(Fresh(good))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(valid); err != nil {
		t.Fatalf("a file podvisor wrote is refused: %v", err)
	}
	short := base64.StdEncoding.EncodeToString([]byte("sixteen bytes!!!"))
	for _, tc := range []struct {
		name, data, want string
	}{
		{"not YAML", "kind: [", "yaml"},
		{"unknown field", strings.Replace(string(valid), "resources:", "resourcez: 1\nresources:", 1), "resourcez"},
		{"secret not base64", strings.Replace(string(valid), good.Secret, "not-base64!", 1), "not base64"},
		{"key of 16 bytes", strings.Replace(string(valid), good.Secret, short, 1), "16 bytes, want 32"},
		{"no identity fallback", strings.Replace(string(valid), "  - identity: {}\n", "", 1), "identity"},
		{"other kind", strings.Replace(string(valid), "EncryptionConfiguration", "Config", 1), "kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestRotationSteps(t *testing.T) {
	k1, _ := NewKey(t0)
	k2, _ := NewKey(t0.Add(time.Second))
	both := WithNewKey(Fresh(k1), k2)
	if got := Keys(both); len(got) != 2 || got[0] != k2 || got[1] != k1 {
		t.Fatalf("after a new key: keys %v, want [k2 k1] (the new one encrypts, the old still decrypts)", got)
	}
	if err := Validate(both); err != nil {
		t.Fatal(err)
	}
	last := WithOnlyFirstKey(both)
	if got := Keys(last); len(got) != 1 || got[0] != k2 {
		t.Fatalf("after removing old keys: %v, want [k2]", got)
	}
	if k1.Name == k2.Name || k1.Secret == k2.Secret {
		t.Errorf("two keys made a second apart share a name or secret")
	}
}

func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	path, err := Prepare(dir, false, t0)
	if err != nil || path != "" {
		t.Fatalf("without the flag and no file: %q, %v; want no encryption", path, err)
	}
	path, err = Prepare(dir, true, t0)
	if err != nil || path != ConfigFile(dir) {
		t.Fatalf("Prepare = %q, %v", path, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	first, _ := os.ReadFile(path)
	// Once enabled, it stays: a start without the flag still uses the key.
	if p, err := Prepare(dir, false, t0.Add(time.Hour)); err != nil || p != path {
		t.Fatalf("restart without the flag: %q, %v; want %q", p, err, path)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, first) {
		t.Errorf("a restart changed the key file")
	}
	// A damaged file is refused, named, and left as it was.
	bad := []byte(strings.Replace(string(first), "secret: ", "secret: x", 1))
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Prepare(dir, true, t0)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "encryption-config.yaml")) {
		t.Fatalf("damaged key file: %v, want an error naming the file", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, bad) {
		t.Errorf("a refused key file was changed")
	}
}
