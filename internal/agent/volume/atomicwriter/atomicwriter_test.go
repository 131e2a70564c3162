package atomicwriter

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteLaysOutDataSymlinkAndUserVisibleLinks(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2024, 1, 2, 15, 4, 5, 0, time.UTC)
	changed, err := Write(dir, map[string]File{"a": {Data: []byte("1")}, "sub/b": {Data: []byte("2"), Mode: 0o400}}, now)
	if err != nil || !changed {
		t.Fatalf("Write: %v %v", changed, err)
	}
	ts, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil || !strings.HasPrefix(ts, "..2024_01_02_15_04_05.") {
		t.Fatalf("..data -> %q %v", ts, err)
	}
	if l, _ := os.Readlink(filepath.Join(dir, "a")); l != "..data/a" {
		t.Errorf("a -> %q", l)
	}
	if l, _ := os.Readlink(filepath.Join(dir, "sub")); l != "..data/sub" {
		t.Errorf("sub -> %q", l)
	}
	if got := read(t, filepath.Join(dir, "sub", "b")); got != "2" {
		t.Errorf("sub/b = %q", got)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub", "b")); fi.Mode().Perm() != 0o400 {
		t.Errorf("sub/b mode %v", fi.Mode())
	}
}

func TestWriteOfTheSamePayloadChangesNothing(t *testing.T) {
	dir := t.TempDir()
	p := map[string]File{"a": {Data: []byte("1")}}
	Write(dir, p, time.Now())
	before, _ := os.Readlink(filepath.Join(dir, "..data"))
	changed, err := Write(dir, p, time.Now())
	after, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil || changed || before != after {
		t.Errorf("second write: changed=%v err=%v ..data %q -> %q", changed, err, before, after)
	}
}

func TestUpdateSwapsVersionsAndDropsRemovedKeys(t *testing.T) {
	dir := t.TempDir()
	Write(dir, map[string]File{"a": {Data: []byte("1")}, "gone": {Data: []byte("x")}}, time.Now())
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	changed, err := Write(dir, map[string]File{"a": {Data: []byte("2")}}, time.Now())
	if err != nil || !changed {
		t.Fatalf("update: %v %v", changed, err)
	}
	if got := read(t, filepath.Join(dir, "a")); got != "2" {
		t.Errorf("a = %q after update", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "gone")); !os.IsNotExist(err) {
		t.Errorf("removed key still visible: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, old)); !os.IsNotExist(err) {
		t.Errorf("old version %s left: %v", old, err)
	}
}

func TestPathsThatEscapeAreRefused(t *testing.T) {
	for _, p := range []string{"/etc/passwd", "../x", "a/../../x", "..data", ""} {
		if _, err := Write(t.TempDir(), map[string]File{p: {Data: []byte("x")}}, time.Now()); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
}
