package controlplane

import (
	"time"

	encryptionconfigcontroller "k8s.io/apiserver/pkg/server/options/encryptionconfig/controller"

	"github.com/podvisor/podvisor/internal/secretsencryption"
)

// The API server checks its encryption configuration for changes this
// often (upstream: a minute), so `podvisor secrets-encrypt rotate-keys`
// moves through its steps in seconds.
const encryptionReloadPoll = time.Second

// encryptionArgs prepares the data dir's secrets encryption and returns the
// API server's flags for it (none when Secrets are stored in plain text).
func encryptionArgs(c Config) ([]string, error) {
	path, err := secretsencryption.Prepare(c.DataDir, c.SecretsEncryption, time.Now())
	if err != nil || path == "" {
		return nil, err
	}
	encryptionconfigcontroller.EncryptionConfigFileChangePollDuration = encryptionReloadPoll
	return []string{
		"--encryption-provider-config=" + path,
		// rotate-keys rewrites the file while podvisor runs.
		"--encryption-provider-config-automatic-reload=true",
	}, nil
}
