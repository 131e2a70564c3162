package mounts

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:   "/a b",
		`/tab\011x`: "/tab\tx",
		`/plain`:    "/plain",
		`/short\04`: `/short\04`,
	} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// Nested mounts under a directory are listed and detached, the inner one
// first (else the outer one could not go); a mount beside it stays.
func TestUnmountUnderDetachesNestedMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	outer, inner, beside := filepath.Join(dir, "under", "a b"), filepath.Join(dir, "under", "a b", "inner"), filepath.Join(dir, "beside")
	for _, d := range []string{outer, inner, beside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(d, unix.MNT_DETACH) })
	}
	points := Points()
	for _, d := range []string{outer, inner, beside} {
		if !slices.Contains(points, d) {
			t.Fatalf("%s not among the mount points", d)
		}
	}
	if n := UnmountUnder(filepath.Join(dir, "under"), points); n != 2 {
		t.Errorf("detached %d mounts, want 2", n)
	}
	after := Points()
	if slices.Contains(after, outer) || slices.Contains(after, inner) || !slices.Contains(after, beside) {
		t.Errorf("mount points after: outer %v, inner %v, beside %v; want only beside",
			slices.Contains(after, outer), slices.Contains(after, inner), slices.Contains(after, beside))
	}
}
