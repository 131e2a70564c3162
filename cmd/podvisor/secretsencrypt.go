package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cluster/secretsencryption"
)

const secretsEncryptUsage = `Usage:
  podvisor secrets-encrypt status [--data-dir DIR]
        whether Secrets are encrypted at rest, with which keys, and whether the
        running API server applied the key file
  podvisor secrets-encrypt rotate-keys [--data-dir DIR]
        with podvisor running: a new key encrypts from now on, every Secret is
        rewritten with it, then the old keys are removed (as k3s's rotate-keys)

Encryption is enabled by starting podvisor up or server with --secrets-encryption.
`

// secretsEncryptFlags defines secrets-encrypt's flags.
func secretsEncryptFlags(dataDir *string) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor secrets-encrypt", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, secretsEncryptUsage); fs.PrintDefaults() }
	fs.StringVar(dataDir, "data-dir", datadir.Default(), "data directory of podvisor")
	return fs
}

func runSecretsEncrypt(args []string) error {
	if len(args) == 0 || (args[0] != "status" && args[0] != "rotate-keys") {
		fmt.Fprint(os.Stderr, secretsEncryptUsage)
		os.Exit(2)
	}
	verb := args[0]
	dir := new(string)
	fs := secretsEncryptFlags(dir)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("secrets-encrypt %s takes no arguments, got %q", verb, fs.Args())
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	path := secretsencryption.ConfigFile(abs)
	c, err := adminClientFor(abs)
	if verb == "status" {
		if err != nil {
			c = nil
		} else if _, verr := c.Discovery().ServerVersion(); verr != nil {
			c = nil // not running
		}
		return secretsencryption.Status(ctx, path, c, os.Stdout)
	}
	if err != nil {
		return err
	}
	return secretsencryption.Rotate(ctx, path, c, time.Now(), os.Stdout)
}

// adminClientFor is a client with the data dir's admin credentials.
func adminClientFor(dir string) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", datadir.AdminKubeconfig(dir))
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	rc.Timeout = 30 * time.Second
	return kubernetes.NewForConfig(rc)
}
