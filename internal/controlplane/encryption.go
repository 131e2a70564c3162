package controlplane

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	encryptionconfigcontroller "k8s.io/apiserver/pkg/server/options/encryptionconfig/controller"

	"github.com/podvisor/podvisor/internal/cluster/secretsencryption"
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

// checkStoredSecrets refuses a key file that cannot read the Secrets in
// etcd (a wrong key, or the file lost) before the API server starts. It
// pages through the Secrets keeping one per key they were stored with.
func checkStoredSecrets(ctx context.Context, e *embed.Etcd, dataDir string) error {
	c := v3client.New(e.Server)
	defer c.Close()
	samples := map[string][]byte{}
	seen := map[string]bool{}
	end := clientv3.GetPrefixRangeEnd(secretsencryption.SecretsPrefix)
	from := secretsencryption.SecretsPrefix
	for {
		resp, err := c.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(100))
		if err != nil {
			return fmt.Errorf("reading Secrets from etcd: %w", err)
		}
		for _, kv := range resp.Kvs {
			if name, ok := secretsencryption.StoredWith(kv.Value); ok && !seen[name] {
				seen[name] = true
				samples[string(kv.Key)] = kv.Value
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return secretsencryption.CheckStored(ctx, secretsencryption.ConfigFile(dataDir), samples)
}
