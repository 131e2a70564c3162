package secretsencryption

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
)

// SecretsPrefix is where the API server keeps Secrets in etcd.
const SecretsPrefix = "/registry/secrets/"

const encPrefix = "k8s:enc:"

// CheckStored verifies, before the API server starts, that the key file at
// path (which may not exist) reads the Secrets stored in etcd (etcd key → value): a
// wrong or missing key would otherwise start a cluster where every read of
// those Secrets fails. One Secret per key name is decrypted, with the API
// server's own transformers.
func CheckStored(ctx context.Context, path string, stored map[string][]byte) error {
	byKey := map[string]string{} // key name (provider/name) → one etcd key stored with it
	for k, v := range stored {
		if name, ok := StoredWith(v); ok {
			if cur, seen := byKey[name]; !seen || k < cur {
				byKey[name] = k
			}
		}
	}
	if len(byKey) == 0 {
		return nil
	}
	names := make([]string, 0, len(byKey))
	for n := range byKey {
		names = append(names, n)
	}
	sort.Strings(names)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("Secrets in etcd are encrypted (e.g. %s with key %s) but the key file %s is missing: restore it from a backup",
			secretName(byKey[names[0]]), names[0], path)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg, err := encryptionconfig.LoadEncryptionConfig(cctx, path, false, "podvisor")
	if err != nil {
		return fmt.Errorf("secrets encryption key file %s: %w", path, err)
	}
	t := cfg.Transformers[schema.GroupResource{Resource: "secrets"}]
	if t == nil {
		return fmt.Errorf("secrets encryption key file %s: it does not configure secrets", path)
	}
	for _, name := range names {
		k := byKey[name]
		if _, _, err := t.TransformFromStorage(ctx, stored[k], value.DefaultContext(k)); err != nil {
			// Upstream's own message for a wrong secretbox key ("output
			// array was not large enough") says nothing useful.
			return fmt.Errorf("secrets encryption key file %s does not decrypt Secret %s, stored with key %s: the file lacks that key or holds another one by its name (another data dir's file, or a key rotated away?)",
				path, secretName(k), name)
		}
	}
	return nil
}

// StoredWith returns "provider:version:name" of the key an encrypted
// value was stored with; false for a value stored in plain text.
func StoredWith(v []byte) (string, bool) {
	s := string(v[:min(len(v), 200)])
	if !strings.HasPrefix(s, encPrefix) {
		return "", false
	}
	parts := strings.SplitN(strings.TrimPrefix(s, encPrefix), ":", 4)
	if len(parts) < 4 {
		return "", false
	}
	return strings.Join(parts[:3], ":"), true
}

func secretName(etcdKey string) string { return strings.TrimPrefix(etcdKey, SecretsPrefix) }
