package volume

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func gidMode(t *testing.T, p string) (uint32, os.FileMode) {
	t.Helper()
	info, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Gid, info.Mode()
}

func TestSetOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another group needs root")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/f", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := SetOwnership(dir, 2345, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		mode os.FileMode
	}{
		{"sub", os.ModeDir | os.ModeSetgid | 0o770},
		{"sub/f", 0o660},
	} {
		gid, mode := gidMode(t, filepath.Join(dir, tc.path))
		if gid != 2345 || mode != tc.mode {
			t.Errorf("%s: gid %d mode %v, want 2345 %v", tc.path, gid, mode, tc.mode)
		}
	}
	if gid, mode := gidMode(t, filepath.Join(dir, "link")); gid != 2345 || mode&os.ModeSymlink == 0 {
		t.Errorf("link: gid %d mode %v", gid, mode)
	}

	// Read-only volumes get group read only; OnRootMismatch leaves a volume
	// whose root matches alone.
	ro := t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "key"), []byte("s"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := SetOwnership(ro, 3000, true, nil); err != nil {
		t.Fatal(err)
	}
	if gid, mode := gidMode(t, filepath.Join(ro, "key")); gid != 3000 || mode != 0o440 {
		t.Errorf("read-only file: gid %d mode %v, want 3000 0440", gid, mode)
	}
	if err := os.WriteFile(filepath.Join(ro, "later"), []byte("s"), 0o400); err != nil {
		t.Fatal(err)
	}
	policy := v1.FSGroupChangeOnRootMismatch
	if err := SetOwnership(ro, 3000, true, &policy); err != nil {
		t.Fatal(err)
	}
	if _, mode := gidMode(t, filepath.Join(ro, "later")); mode != 0o400 {
		t.Errorf("OnRootMismatch with a matching root walked the volume: later is %v", mode)
	}
	if err := SetOwnership(ro, 3001, true, &policy); err != nil {
		t.Fatal(err)
	}
	if gid, _ := gidMode(t, filepath.Join(ro, "later")); gid != 3001 {
		t.Errorf("OnRootMismatch with another group did not walk: gid %d", gid)
	}
}
