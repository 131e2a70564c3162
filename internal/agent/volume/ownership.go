package volume

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	v1 "k8s.io/api/core/v1"
)

// SetOwnership gives a pod volume to the pod's fsGroup, as the kubelet does
// for volumes that support it (emptyDir, configMap, secret, downwardAPI,
// projected): every file and directory gets group gid, group read (and
// write, unless readOnly) permission, directories also group execute and
// setgid, so that files made later inherit the group. Symbolic links only
// change group. With fsGroupChangePolicy OnRootMismatch nothing is done
// when the volume's root already has the group and permissions.
func SetOwnership(dir string, gid int64, readOnly bool, policy *v1.PodFSGroupChangePolicy) error {
	mask := os.FileMode(0o660)
	if readOnly {
		mask = 0o440
	}
	if policy != nil && *policy == v1.FSGroupChangeOnRootMismatch && rootMatches(dir, gid, mask) {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, -1, int(gid)); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		m := mask
		if d.IsDir() {
			m |= os.ModeSetgid | 0o110
		}
		return os.Chmod(p, info.Mode()&(os.ModePerm|os.ModeSetgid|os.ModeSetuid|os.ModeSticky)|m)
	})
}

// rootMatches: the root already has group gid, the mask's permissions and
// setgid.
func rootMatches(dir string, gid int64, mask os.FileMode) bool {
	info, err := os.Stat(dir)
	if err != nil {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || int64(st.Gid) != gid {
		return false
	}
	want := mask | os.ModeSetgid | 0o110
	return info.Mode()&want == want
}
