// Package atomicwriter writes the files of ConfigMap, Secret, downward API and
// projected volumes the way the kubelet lays them out, so that a reader
// inside the container always sees one complete version of the volume:
//
//	<dir>/..2024_01_02_15_04_05.123456789/key   the files of one version
//	<dir>/..data -> ..2024_01_02_15_04_05.123456789
//	<dir>/key -> ..data/key                     what the container reads
//
// A new version is written into a fresh timestamped directory and published
// by renaming a new ..data symlink over the old one, one atomic step.
package atomicwriter

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
)

// File is one file of a volume's payload.
type File struct {
	Data []byte
	Mode os.FileMode // permission bits; 0 means 0644
	// UID and GID, when UID >= 0, own the file (a projected token for runAsUser).
	UID, GID int
}

// Write makes dir hold exactly payload (relative path → file), replacing the
// previous version atomically. It writes nothing when the payload is what dir
// already holds, and reports whether it published a new version.
func Write(dir string, payload map[string]File, now time.Time) (bool, error) {
	for p := range payload {
		if err := validPath(p); err != nil {
			return false, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	oldTS, err := os.Readlink(filepath.Join(dir, dataDirName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if oldTS != "" && same(filepath.Join(dir, oldTS), payload) {
		return false, nil
	}
	tsDir, err := os.MkdirTemp(dir, now.UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return false, err
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		os.RemoveAll(tsDir)
		return false, err
	}
	if err := writePayload(tsDir, payload); err != nil {
		os.RemoveAll(tsDir)
		return false, err
	}
	tmpLink := filepath.Join(dir, newDataDirName)
	os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		os.RemoveAll(tsDir)
		return false, err
	}
	if err := os.Rename(tmpLink, filepath.Join(dir, dataDirName)); err != nil {
		os.Remove(tmpLink)
		os.RemoveAll(tsDir)
		return false, err
	}
	if err := linkTopLevel(dir, payload); err != nil {
		return true, err
	}
	if oldTS != "" && oldTS != filepath.Base(tsDir) {
		if err := os.RemoveAll(filepath.Join(dir, oldTS)); err != nil {
			return true, err
		}
	}
	return true, nil
}

// validPath refuses what could escape the volume or collide with its
// bookkeeping, as upstream: absolute paths, "..", a leading "..".
func validPath(p string) error {
	switch {
	case p == "":
		return errors.New("volume file path is empty")
	case filepath.IsAbs(p):
		return fmt.Errorf("volume file path %q is absolute", p)
	case strings.HasPrefix(p, ".."):
		return fmt.Errorf("volume file path %q starts with '..'", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return fmt.Errorf("volume file path %q contains '..'", p)
		}
	}
	return nil
}

// same reports whether tsDir holds exactly payload, modes included.
func same(tsDir string, payload map[string]File) bool {
	n := 0
	err := filepath.Walk(tsDir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(tsDir, path)
		f, ok := payload[rel]
		if !ok || fi.Mode().Perm() != mode(f) {
			return errors.New("differs")
		}
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(b, f.Data) {
			return errors.New("differs")
		}
		n++
		return nil
	})
	return err == nil && n == len(payload)
}

func mode(f File) os.FileMode {
	if f.Mode == 0 {
		return 0o644
	}
	return f.Mode.Perm()
}

func writePayload(tsDir string, payload map[string]File) error {
	for p, f := range payload {
		full := filepath.Join(tsDir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, f.Data, mode(f)); err != nil {
			return err
		}
		if err := os.Chmod(full, mode(f)); err != nil { // WriteFile's mode is subject to the umask
			return err
		}
		if f.UID >= 0 && (f.UID != 0 || f.GID != 0) {
			if err := os.Lchown(full, f.UID, f.GID); err != nil {
				return err
			}
		}
	}
	return nil
}

// linkTopLevel points each top-level name of the payload through ..data and
// removes the names the payload no longer has.
func linkTopLevel(dir string, payload map[string]File) error {
	want := map[string]bool{}
	for p := range payload {
		first, _, _ := strings.Cut(p, "/")
		want[first] = true
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		link := filepath.Join(dir, n)
		target := filepath.Join(dataDirName, n)
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") || want[e.Name()] {
			continue
		}
		if e.Type()&os.ModeSymlink != 0 {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}
