// Package datadir owns podvisor's data directory: where it is, its layout
// version, and the facts a restart must find again (node name, etcd ports).
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Layout is the version of the directory layout this podvisor writes. A
// directory with another layout is refused rather than guessed at.
const Layout = 1

const stateFile = "podvisor.json"

// State is recorded on the first start and read on every later one.
type State struct {
	Layout         int    `json:"layout"`
	NodeName       string `json:"nodeName"`
	EtcdClientPort int    `json:"etcdClientPort"`
	EtcdPeerPort   int    `json:"etcdPeerPort"`
}

// Default is $XDG_DATA_HOME/podvisor, or ~/.local/share/podvisor.
func Default() string {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "podvisor")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "podvisor")
	}
	return filepath.Join(home, ".local", "share", "podvisor")
}

// AdminKubeconfig is the kubeconfig with a system:masters certificate.
func AdminKubeconfig(dir string) string { return filepath.Join(dir, "admin.kubeconfig") }

// Open checks that dir is usable (creating it if needed) and returns its
// recorded state; a new directory returns a zero State with Layout set.
func Open(dir string) (State, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return State{}, fmt.Errorf("data dir %s: %w", dir, unwrapPath(err))
	}
	probe := filepath.Join(dir, ".write-test")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return State{}, fmt.Errorf("data dir %s is not writable: %w", dir, unwrapPath(err))
	}
	os.Remove(probe)
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		if entries, _ := os.ReadDir(dir); len(entries) > 0 && hasForeign(dir, entries) {
			return State{}, fmt.Errorf("data dir %s is not empty and has no %s: not a podvisor data dir (or one from an incompatible version)", dir, stateFile)
		}
		return State{Layout: Layout}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("data dir %s: %w", dir, unwrapPath(err))
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("data dir %s: %s is corrupt: %v", dir, stateFile, err)
	}
	if st.Layout != Layout {
		return State{}, fmt.Errorf("data dir %s has layout version %d; this podvisor understands version %d (incompatible version)", dir, st.Layout, Layout)
	}
	return st, nil
}

// Save records st in dir.
func Save(dir string, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// hasForeign reports entries other than what podvisor itself writes first.
func hasForeign(dir string, entries []os.DirEntry) bool {
	for _, e := range entries {
		switch e.Name() {
		// images/ is the air-gap folder and registries.yaml the registry
		// mirrors (internal/runtime/containerd), manifests/ the objects applied at
		// start (internal/cluster/manifests), coredns/ the node's DNS fragments
		// (internal/cluster/clusterdns), all written before the first start.
		case "podvisor.log", "pki", "kubeconfigs", "admin.kubeconfig", "images", "registries.yaml", "manifests", "coredns":
		case "containerd":
			// Only containerd/root: a filesystem of its own for the
			// images, mounted there before the first start.
			inner, _ := os.ReadDir(filepath.Join(dir, e.Name()))
			if len(inner) != 1 || inner[0].Name() != "root" {
				return true
			}
		default:
			return true
		}
	}
	return false
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
