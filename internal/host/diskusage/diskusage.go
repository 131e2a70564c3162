// Package diskusage measures directories as `du` does: allocated blocks and
// inodes, without following symlinks or leaving the filesystem.
package diskusage

import (
	"io/fs"
	"path/filepath"
	"syscall"
)

// Usage of a directory tree.
type Usage struct {
	Bytes  int64 // allocated, 512-byte blocks as du counts them
	Inodes int64
}

// Of walks dir; a missing dir is zero, unreadable parts are skipped (files
// come and go while a container writes).
func Of(dir string) Usage {
	var u Usage
	var dev uint64
	seen := map[uint64]bool{} // hard links count once
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(path, &st) != nil {
			return nil
		}
		if path == dir {
			dev = st.Dev
		} else if st.Dev != dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		u.Bytes += st.Blocks * 512
		u.Inodes++
		return nil
	})
	return u
}
