// Package secretsencryption keeps the API server's encryption of Secrets at
// rest: the EncryptionConfiguration with its keys in the data directory, the
// checks that refuse a damaged one, and the rotation of its key.
//
// The provider is secretbox (XSalsa20-Poly1305, 32-byte keys), the one
// upstream's documentation recommends among the local-key providers: aescbc,
// k3s's default, is open to padding-oracle attacks, and aesgcm's random
// nonces call for a new key every 200,000 writes. identity comes last so
// that Secrets written before encryption was enabled still read; rotation
// rewrites them encrypted.
package secretsencryption

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"
)

// ConfigFile is where the data dir keeps the configuration and its keys (0600).
func ConfigFile(dataDir string) string { return filepath.Join(dataDir, "encryption-config.yaml") }

// Provider is the name of the encryption provider, as in the stored
// values' prefix k8s:enc:secretbox:v1:KEY:.
const Provider = "secretbox"

const keyBytes = 32

// Config is the API server's EncryptionConfiguration.
type Config = apiserverv1.EncryptionConfiguration

// NewKey makes a random key named for the time it was made.
func NewKey(now time.Time) (apiserverv1.Key, error) {
	b := make([]byte, keyBytes)
	if _, err := rand.Read(b); err != nil {
		return apiserverv1.Key{}, err
	}
	return apiserverv1.Key{Name: "key-" + now.UTC().Format("20060102T150405.000Z"),
		Secret: base64.StdEncoding.EncodeToString(b)}, nil
}

// Fresh is the configuration encrypting Secrets with key.
func Fresh(key apiserverv1.Key) Config {
	return Config{
		TypeMeta: metaV1(),
		Resources: []apiserverv1.ResourceConfiguration{{
			Resources: []string{"secrets"},
			Providers: []apiserverv1.ProviderConfiguration{
				{Secretbox: &apiserverv1.SecretboxConfiguration{Keys: []apiserverv1.Key{key}}},
				{Identity: &apiserverv1.IdentityConfiguration{}},
			},
		}},
	}
}

func metaV1() metav1.TypeMeta {
	return metav1.TypeMeta{Kind: "EncryptionConfiguration", APIVersion: "apiserver.config.k8s.io/v1"}
}

// Keys are the secretbox keys, the first one encrypting new writes.
func Keys(c Config) []apiserverv1.Key {
	return c.Resources[0].Providers[0].Secretbox.Keys
}

// WithNewKey is c with key first: it encrypts from then on, the others
// still decrypt (rotation's first step).
func WithNewKey(c Config, key apiserverv1.Key) Config {
	n := Fresh(key)
	n.Resources[0].Providers[0].Secretbox.Keys = append([]apiserverv1.Key{key}, Keys(c)...)
	return n
}

// WithOnlyFirstKey is c without its older keys (rotation's last step, once
// every Secret was rewritten with the first).
func WithOnlyFirstKey(c Config) Config { return Fresh(Keys(c)[0]) }

// Validate checks that c is a configuration podvisor writes: Secrets only,
// secretbox keys of 32 bytes with unique names, then identity.
func Validate(c Config) error {
	if c.Kind != "EncryptionConfiguration" || c.APIVersion != "apiserver.config.k8s.io/v1" {
		return fmt.Errorf("kind %q apiVersion %q, want EncryptionConfiguration apiserver.config.k8s.io/v1", c.Kind, c.APIVersion)
	}
	if len(c.Resources) != 1 || len(c.Resources[0].Resources) != 1 || c.Resources[0].Resources[0] != "secrets" {
		return errors.New("resources: want one entry for secrets")
	}
	ps := c.Resources[0].Providers
	if len(ps) == 0 || ps[0].Secretbox == nil || len(ps[0].Secretbox.Keys) == 0 {
		return errors.New("providers: the first must be secretbox with at least one key")
	}
	seen := map[string]bool{}
	for i, k := range ps[0].Secretbox.Keys {
		if k.Name == "" || seen[k.Name] {
			return fmt.Errorf("secretbox key %d: name %q empty or repeated", i, k.Name)
		}
		seen[k.Name] = true
		b, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			return fmt.Errorf("secretbox key %q: secret is not base64: %v", k.Name, err)
		}
		if len(b) != keyBytes {
			return fmt.Errorf("secretbox key %q: secret is %d bytes, want %d", k.Name, len(b), keyBytes)
		}
	}
	if len(ps) != 2 || ps[1].Identity == nil {
		return errors.New("providers: the second and last must be identity")
	}
	return nil
}

// Parse reads a configuration strictly and validates it.
func Parse(data []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, err
	}
	return c, Validate(c)
}

// Load reads and validates the file; errors name it.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("secrets encryption key file: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("secrets encryption key file %s: %w", path, err)
	}
	return c, nil
}

// Marshal is the file's content.
func Marshal(c Config) ([]byte, error) { return yaml.Marshal(c) }

// Write replaces the file atomically, readable by root only.
func Write(path string, c Config) ([]byte, error) {
	data, err := Marshal(c)
	if err != nil {
		return nil, err
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return data, nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return nil, err
	}
	return data, os.Rename(tmp, path)
}

// Prepare is what the control plane calls at start: with enable, a key is
// made on first use; an existing file (encryption stays on once enabled,
// else the Secrets written encrypted could not be read) is validated and
// its mode kept at 0600. It returns the file to give the API server, or ""
// when Secrets are not encrypted.
func Prepare(dataDir string, enable bool, now time.Time) (string, error) {
	path := ConfigFile(dataDir)
	_, err := os.Stat(path)
	switch {
	case err == nil:
		if _, err := Load(path); err != nil {
			return "", err
		}
		if err := os.Chmod(path, 0o600); err != nil {
			return "", err
		}
		return path, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("secrets encryption key file: %w", err)
	case !enable:
		return "", nil
	}
	key, err := NewKey(now)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", err
	}
	if _, err := Write(path, Fresh(key)); err != nil {
		return "", fmt.Errorf("secrets encryption key file %s: %w", path, err)
	}
	return path, nil
}
