package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
)

// load reads the image tagged ref back from the tar at p, as an importer would.
func load(t *testing.T, p, ref string) (*v1.ConfigFile, map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(p, &tag)
	if err != nil {
		t.Fatalf("%s in %s: %v", ref, p, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	headers, contents := map[string]*tar.Header{}, map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := "/" + strings.TrimSuffix(hdr.Name, "/")
			headers[p] = hdr
			contents[p], _ = io.ReadAll(tr)
		}
		rc.Close()
	}
	return cf, headers, contents
}

func wantFile(t *testing.T, headers map[string]*tar.Header, p string, typ byte, mode int64, target string) {
	t.Helper()
	h, ok := headers[p]
	switch {
	case !ok:
		t.Errorf("%s is missing", p)
	case h.Typeflag != typ || h.Mode != mode || h.Linkname != target:
		t.Errorf("%s: type %c mode %o target %q; want %c %o %q", p, h.Typeflag, h.Mode, h.Linkname, typ, mode, target)
	}
}

func TestBusyboxHasEveryAppletUsersAndAStickyTmp(t *testing.T) {
	p := Build(t, "busybox")
	for _, ref := range []string{BusyboxImage, BusyboxLatestImage} {
		cf, headers, contents := load(t, p, ref)
		if !reflect.DeepEqual(cf.Config.Cmd, []string{"sh"}) || len(cf.Config.Entrypoint) != 0 {
			t.Errorf("%s: entrypoint %q cmd %q, want cmd [sh]", ref, cf.Config.Entrypoint, cf.Config.Cmd)
		}
		wantFile(t, headers, "/bin/busybox", tar.TypeReg, 0o755, "")
		for _, applet := range []string{"/bin/sh", "/bin/sleep", "/bin/cat", "/bin/env", "/usr/bin/env", "/sbin/ip", "/bin/ip"} {
			wantFile(t, headers, applet, tar.TypeSymlink, 0o777, "/bin/busybox")
		}
		wantFile(t, headers, "/tmp", tar.TypeDir, 0o1777, "")
		wantFile(t, headers, "/root", tar.TypeDir, 0o700, "")
		if h := headers["/home/user"]; h == nil || h.Uid != 1000 || h.Gid != 1000 {
			t.Errorf("/home/user is not user 1000's: %+v", h)
		}
		for _, user := range []string{"root:x:0:0:", "user:x:1000:1000:", "nobody:x:65534:65534:"} {
			if !bytes.Contains(contents["/etc/passwd"], []byte("\n"+user)) && !bytes.HasPrefix(contents["/etc/passwd"], []byte(user)) {
				t.Errorf("/etc/passwd has no %q", user)
			}
		}
		if !bytes.Contains(contents["/etc/group"], []byte("user:x:1000:")) {
			t.Errorf("/etc/group has no group 1000: %q", contents["/etc/group"])
		}
	}
}

func TestTestserverVariantsDifferOnlyInConfig(t *testing.T) {
	for _, c := range []struct {
		recipe, ref, stopSignal, user string
	}{
		{"testserver", TestserverImage, "", ""},
		{"testserver-sigusr1", TestserverSIGUSR1Image, "SIGUSR1", ""},
		{"testserver-nonroot", TestserverNonRootImage, "", "1000:1000"},
	} {
		cf, headers, _ := load(t, Build(t, c.recipe), c.ref)
		got := cf.Config
		if !reflect.DeepEqual(got.Entrypoint, []string{"/testserver"}) || !reflect.DeepEqual(got.Cmd, []string{"pause"}) ||
			got.StopSignal != c.stopSignal || got.User != c.user {
			t.Errorf("%s: entrypoint %q cmd %q stop signal %q user %q", c.ref, got.Entrypoint, got.Cmd, got.StopSignal, got.User)
		}
		if _, ok := got.ExposedPorts["8080/tcp"]; !ok {
			t.Errorf("%s: ports %v", c.ref, got.ExposedPorts)
		}
		wantFile(t, headers, "/testserver", tar.TypeReg, 0o755, "")
		wantFile(t, headers, "/tmp", tar.TypeDir, 0o1777, "")
	}
}

func TestPauseIsUpstreamShaped(t *testing.T) {
	cf, headers, contents := load(t, Build(t, "pause"), PauseImage)
	if !reflect.DeepEqual(cf.Config.Entrypoint, []string{"/pause"}) || cf.Config.User != "65535:65535" {
		t.Errorf("config %+v", cf.Config)
	}
	wantFile(t, headers, "/pause", tar.TypeReg, 0o755, "")
	if n := len(contents["/pause"]); n > 4096 {
		t.Errorf("/pause is %d bytes", n)
	}
}

func TestBuildIsSharedAndRebuildsIdentically(t *testing.T) {
	p := Build(t, "testserver")
	if again := Build(t, "testserver"); again != p {
		t.Errorf("second Build gave %s, first %s", again, p)
	}
	fresh, err := WriteTar(t.TempDir(), "testserver", imagebuild.Docker)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(p)
	b, _ := os.ReadFile(fresh)
	if !bytes.Equal(a, b) {
		t.Error("a rebuilt testserver tar differs from the cached one: the build is not reproducible")
	}
	if _, err := Image("nginx"); err == nil {
		t.Error("Image(nginx): no error for a recipe that does not exist")
	}
}
