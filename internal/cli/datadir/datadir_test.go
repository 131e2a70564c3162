package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What a user puts in a data dir before its first start (the air-gap
// images folder, registries.yaml, DNS fragments) makes no foreign dir; anything else does.
func TestOpenANewDirWithWhatUsersPrepare(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "registries.yaml"), []byte("mirrors: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The node's DNS fragments (docs/supported.md, Cluster DNS).
	if err := os.MkdirAll(filepath.Join(dir, "coredns"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "coredns", "corp.server"), []byte("corp.example {\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The mount point of a filesystem of its own for containerd's images.
	if err := os.MkdirAll(filepath.Join(dir, "containerd", "root", "lost+found"), 0o755); err != nil {
		t.Fatal(err)
	}
	if st, err := Open(dir); err != nil || st.Layout != Layout || st.NodeName != "" {
		t.Fatalf("Open: %+v, %v; want a new dir", st, err)
	}
	// Anything else in containerd/ is an earlier containerd's.
	if err := os.WriteFile(filepath.Join(dir, "containerd", "config.toml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a podvisor data dir") {
		t.Errorf("Open of a dir with a foreign containerd/: %v", err)
	}
	os.Remove(filepath.Join(dir, "containerd", "config.toml"))
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a podvisor data dir") {
		t.Errorf("Open of a dir with a foreign file: %v", err)
	}
}
