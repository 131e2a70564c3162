package keptexit

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	at := time.Unix(0, 1795924697309626735)
	for _, tc := range []struct {
		in   string
		want Exit
		ok   bool
	}{
		{"7 1795924697309626735\n", Exit{Status: 7, At: at}, true},
		{"0 1795924697309626735", Exit{Status: 0, At: at}, true},
		{"137 1795924697309626735\n", Exit{Status: 137, At: at}, true},
		{"", Exit{}, false},
		{"7\n", Exit{}, false},
		{"7 0\n", Exit{}, false},
		{"-1 1795924697309626735\n", Exit{}, false},
		{"7 1795924697309626735 extra\n", Exit{}, false},
		{"x 1795924697309626735\n", Exit{}, false},
	} {
		got, err := parse([]byte(tc.in))
		if (err == nil) != tc.ok || (tc.ok && (got.Status != tc.want.Status || !got.At.Equal(tc.want.At))) {
			t.Errorf("parse(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// A record is kept only where the CRI has a directory for the container,
// and read back as written.
func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	at := time.Now().Round(0)
	if err := os.Mkdir(filepath.Join(dir, "c1"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "sandbox", "../c1", ""} {
		if err := Write(dir, id, Exit{Status: 9, At: at}); err != nil {
			t.Errorf("Write(%q): %v", id, err)
		}
	}
	if e, ok := Read(dir, "c1"); !ok || e.Status != 9 || !e.At.Equal(at) {
		t.Errorf("Read(c1) = %+v, %v; want 9 at %v", e, ok, at)
	}
	for _, id := range []string{"sandbox", "../c1", ""} {
		if e, ok := Read(dir, id); ok {
			t.Errorf("Read(%q) = %+v, want nothing", id, e)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sandbox")); err == nil {
		t.Error("a directory was made for a container the CRI has none for")
	}
}
