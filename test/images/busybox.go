package images

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
)

// busyboxBinary is where Debian's busybox-static installs its binary.
const busyboxBinary = "/bin/busybox"

const (
	passwd = `root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/home:/bin/false
`
	group = `root:x:0:
user:x:1000:
nobody:x:65534:
`
)

// busybox is Debian's static busybox with a symlink for each applet, both in
// /bin (as upstream's busybox image, where every applet is in /bin) and where
// busybox itself would install it (/usr/bin/env, /sbin/ip), so scripts
// written for either layout run; plus the flock program of ./flock in both
// places, since Debian builds busybox without upstream's flock applet.
func busybox() (imagebuild.Image, error) {
	bin, err := os.ReadFile(busyboxBinary)
	if err != nil {
		return imagebuild.Image{}, fmt.Errorf("busybox image: %w (apt-get install busybox-static)", err)
	}
	if err := checkStatic(bin); err != nil {
		return imagebuild.Image{}, fmt.Errorf("busybox image: %s: %w (apt-get install busybox-static)", busyboxBinary, err)
	}
	out, err := exec.Command(busyboxBinary, "--list-full").Output()
	if err != nil {
		return imagebuild.Image{}, fmt.Errorf("busybox image: %s --list-full: %w", busyboxBinary, err)
	}
	flock, err := program("flock")
	if err != nil {
		return imagebuild.Image{}, fmt.Errorf("busybox image: %w", err)
	}
	files := []imagebuild.File{
		imagebuild.Regular("/bin/busybox", 0o755, bin),
		imagebuild.Regular("/etc/passwd", 0o644, []byte(passwd)),
		imagebuild.Regular("/etc/group", 0o644, []byte(group)),
		imagebuild.Dir("/root", 0o700),
		{Path: "/home/user", Mode: os.ModeDir | 0o755, UID: 1000, GID: 1000},
		imagebuild.Dir("/tmp", os.ModeSticky|0o777),
		imagebuild.Dir("/var/tmp", os.ModeSticky|0o777),
		imagebuild.Regular("/bin/flock", 0o755, flock),
		imagebuild.Regular("/usr/bin/flock", 0o755, flock),
	}
	seen := map[string]bool{"/bin/busybox": true, "/bin/flock": true, "/usr/bin/flock": true}
	link := func(p string) {
		if !seen[p] {
			seen[p] = true
			files = append(files, imagebuild.Symlink(p, "/bin/busybox"))
		}
	}
	for _, full := range strings.Fields(string(out)) {
		applet := full[strings.LastIndexByte(full, '/')+1:]
		link("/bin/" + applet)
		link("/" + full)
	}
	return imagebuild.Image{
		Names: []string{BusyboxImage, BusyboxLatestImage},
		Config: imagebuild.Config{
			Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd: []string{"sh"},
		},
		Files: files,
	}, nil
}

// checkStatic refuses a dynamically linked binary: Debian's plain busybox
// package installs one at the same path, and it cannot run in an image
// without its libc.
func checkStatic(bin []byte) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked")
		}
	}
	return nil
}
