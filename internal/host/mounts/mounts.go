// Package mounts reads the mount table of this process's mount namespace
// and unmounts what lies under a directory: the pod workers' volume
// teardown and `podvisor reset` both need it.
package mounts

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Points lists the mount points of this process's mount namespace, in the
// table's order (a mount after those it is mounted over).
func Points() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	// A reader, not a Scanner: a mount line longer than a Scanner's 64 KiB
	// (an overlay with many layers) would end the listing early.
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if fields := strings.Fields(line); len(fields) > 4 {
			out = append(out, unescape(fields[4]))
		}
		if err != nil {
			break
		}
	}
	return out
}

// UnmountUnder detaches every mount point of points below dir, the deepest
// (latest) first, and returns how many it detached.
func UnmountUnder(dir string, points []string) int {
	prefix := filepath.Clean(dir) + string(filepath.Separator)
	n := 0
	for i := len(points) - 1; i >= 0; i-- {
		if strings.HasPrefix(points[i], prefix) && unix.Unmount(points[i], unix.MNT_DETACH) == nil {
			n++
		}
	}
	return n
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
