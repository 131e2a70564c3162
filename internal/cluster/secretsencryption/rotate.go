package secretsencryption

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The API server reloads the file (--encryption-provider-config-automatic-reload)
// and reports the hash of the content it applied in this metric.
const appliedMetric = "apiserver_encryption_config_controller_last_config_info"

// contentHash is the hash the API server reports for a file's content.
func contentHash(data []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(data)) }

// Applied reports whether the running API server encrypts with data (the
// file's content): its metrics name the content's hash.
func Applied(ctx context.Context, c kubernetes.Interface, data []byte) (bool, error) {
	m, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return false, fmt.Errorf("API server metrics: %w", err)
	}
	want := `hash="` + contentHash(data) + `"`
	for _, line := range strings.Split(string(m), "\n") {
		if strings.HasPrefix(line, appliedMetric+"{") && strings.Contains(line, want) {
			return true, nil
		}
	}
	return false, nil
}

// Rotate replaces the key of the running cluster whose file is path, as
// k3s's rotate-keys: a new key first (it encrypts, the old still decrypts),
// every Secret rewritten (so it is encrypted with the new key), then the old
// keys removed. Each step waits until the API server applied the file. A
// damaged file or an API server that cannot be reached stops it before
// anything changed; a failure later leaves a file that reads every Secret.
func Rotate(ctx context.Context, path string, c kubernetes.Interface, now time.Time, out io.Writer) error {
	cur, err := Load(path)
	if err != nil {
		return err
	}
	if _, err := c.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("the API server (podvisor must run to rotate keys): %w", err)
	}
	key, err := NewKey(now)
	if err != nil {
		return err
	}
	if err := apply(ctx, path, WithNewKey(cur, key), c); err != nil {
		return err
	}
	fmt.Fprintf(out, "new key %s encrypts from now on\n", key.Name)
	n, err := rewriteSecrets(ctx, c)
	if err != nil {
		return fmt.Errorf("rewriting Secrets with the new key (the old keys stay until it succeeds; run rotate-keys again): %w", err)
	}
	fmt.Fprintf(out, "%d Secret(s) rewritten with key %s\n", n, key.Name)
	if err := apply(ctx, path, WithOnlyFirstKey(WithNewKey(cur, key)), c); err != nil {
		return err
	}
	fmt.Fprintf(out, "old key(s) removed: %d\n", len(Keys(cur)))
	return nil
}

// apply writes cfg and waits until the API server uses it.
func apply(ctx context.Context, path string, cfg Config, c kubernetes.Interface) error {
	data, err := Write(path, cfg)
	if err != nil {
		return fmt.Errorf("secrets encryption key file %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		ok, err := Applied(ctx, c, data)
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server did not load %s within 2m (last error: %v)", path, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// rewriteSecrets updates every Secret unchanged: the API server writes a
// value read with a key other than the first again (it is "stale"), now
// encrypted with the first. A conflict means someone wrote it since, with
// the new key already; a Secret deleted meanwhile needs nothing.
func rewriteSecrets(ctx context.Context, c kubernetes.Interface) (int, error) {
	n := 0
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := c.CoreV1().Secrets("").List(ctx, opts)
		if err != nil {
			return n, err
		}
		for i := range list.Items {
			s := &list.Items[i]
			_, err := c.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
			switch {
			case err == nil:
				n++
			case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			default:
				return n, fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Name, err)
			}
		}
		if list.Continue == "" {
			return n, nil
		}
		opts.Continue = list.Continue
	}
}

// Status describes the data dir's encryption for `secrets-encrypt status`;
// c may be nil when podvisor is not running.
func Status(ctx context.Context, path string, c kubernetes.Interface, out io.Writer) error {
	cur, err := Load(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(out, "Encryption Status: Disabled (no %s; start podvisor with --secrets-encryption)\n", path)
			return nil
		}
		return err
	}
	keys := Keys(cur)
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	fmt.Fprintf(out, "Encryption Status: Enabled\nProvider: %s\nKey file: %s\nActive key: %s\nKeys: %s\n",
		Provider, path, keys[0].Name, strings.Join(names, ", "))
	state := "unknown (podvisor is not running)"
	if c != nil {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if ok, err := Applied(ctx, c, data); err != nil {
			state = "unknown (" + err.Error() + ")"
		} else if ok {
			state = "yes"
		} else {
			state = "not yet (the API server reloads the file within seconds)"
		}
	}
	fmt.Fprintf(out, "Applied by the API server: %s\n", state)
	return nil
}
