package imagebuild

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func sample() Image {
	return Image{
		Names: []string{"podvisor.test/sample:1", "busybox"},
		Config: Config{
			Entrypoint:   []string{"/bin/app"},
			Cmd:          []string{"serve"},
			Env:          []string{"PATH=/bin", "A=b"},
			WorkingDir:   "/work",
			User:         "1000:1000",
			StopSignal:   "SIGUSR1",
			ExposedPorts: []string{"8080/tcp"},
			Labels:       map[string]string{"org.example": "yes"},
		},
		Files: []File{
			Regular("/bin/app", 0o755, []byte("#!/bin/sh\n")),
			Symlink("/bin/sh", "app"),
			Dir("/tmp", 0o777|fs.ModeSticky),
			{Path: "/home/user/.profile", Mode: 0o600, Data: []byte("x"), UID: 1000, GID: 1000},
			Regular("/usr/bin/suid", 0o755|fs.ModeSetuid, nil),
		},
	}
}

// entry is what a layer tar says of one path.
type entry struct {
	typ    byte
	mode   int64
	target string
	data   string
	uid    int
}

func layerEntries(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %v, %d", err, len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if !hdr.ModTime.Equal(Epoch) {
			t.Errorf("%s: mtime %v, want the epoch", hdr.Name, hdr.ModTime)
		}
		out[hdr.Name] = entry{hdr.Typeflag, hdr.Mode, hdr.Linkname, string(data), hdr.Uid}
	}
}

func checkSample(t *testing.T, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := sample().Config.v1()
	if !reflect.DeepEqual(cf.Config, want) {
		t.Errorf("config = %+v, want %+v", cf.Config, want)
	}
	if cf.OS != "linux" || !cf.Created.Equal(Epoch) {
		t.Errorf("os %q created %v", cf.OS, cf.Created)
	}
	got := layerEntries(t, img)
	wantEntries := map[string]entry{
		"bin/":               {typ: tar.TypeDir, mode: 0o755},
		"bin/app":            {typ: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\n"},
		"bin/sh":             {typ: tar.TypeSymlink, mode: 0o777, target: "app"},
		"tmp/":               {typ: tar.TypeDir, mode: 0o1777},
		"home/":              {typ: tar.TypeDir, mode: 0o755},
		"home/user/":         {typ: tar.TypeDir, mode: 0o755},
		"home/user/.profile": {typ: tar.TypeReg, mode: 0o600, data: "x", uid: 1000},
		"usr/":               {typ: tar.TypeDir, mode: 0o755},
		"usr/bin/":           {typ: tar.TypeDir, mode: 0o755},
		"usr/bin/suid":       {typ: tar.TypeReg, mode: 0o4755},
	}
	if !reflect.DeepEqual(got, wantEntries) {
		t.Errorf("layer entries:\n got %v\nwant %v", got, wantEntries)
	}
}

func writeArchive(t *testing.T, im Image, f Format) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := im.WriteArchiveFile(p, f); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDockerArchiveReadsBackWithEveryName(t *testing.T) {
	im := sample()
	p := writeArchive(t, im, Docker)
	id, err := im.ID()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"podvisor.test/sample:1", "docker.io/library/busybox:latest"} {
		tag, err := name.NewTag(n)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(p, &tag)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		checkSample(t, img)
		cfgName, err := img.ConfigName()
		if err != nil || cfgName.String() != id {
			t.Errorf("%s: config digest %v (%v), want the image ID %s", n, cfgName, err, id)
		}
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(p) })
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"podvisor.test/sample:1", "docker.io/library/busybox:latest"}; len(m) != 1 || !reflect.DeepEqual(m[0].RepoTags, want) {
		t.Errorf("manifest.json = %+v, want one entry tagged %v", m, want)
	}
}

func TestOCIArchiveReadsBackWithEveryName(t *testing.T) {
	p := writeArchive(t, sample(), OCI)
	dir := t.TempDir()
	untar(t, p, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range im.Manifests {
		names = append(names, d.Annotations[ociImageNameAnnotation]+" "+d.Annotations["org.opencontainers.image.ref.name"])
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkSample(t, img)
	}
	if want := []string{"podvisor.test/sample:1 1", "docker.io/library/busybox:latest latest"}; !reflect.DeepEqual(names, want) {
		t.Errorf("index names = %q, want %q", names, want)
	}
}

func TestSameInputsGiveSameBytesAndID(t *testing.T) {
	for _, f := range []Format{Docker, OCI} {
		a, _ := os.ReadFile(writeArchive(t, sample(), f))
		b, _ := os.ReadFile(writeArchive(t, sample(), f))
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two writes of the same image differ", f)
		}
	}
	id1, _ := sample().ID()
	reordered := sample()
	reordered.Files[0], reordered.Files[4] = reordered.Files[4], reordered.Files[0]
	id2, _ := reordered.ID()
	changed := sample()
	changed.Files[0].Data = []byte("#!/bin/ash\n")
	id3, _ := changed.ID()
	if id1 != id2 || id1 == id3 || !strings.HasPrefix(id1, "sha256:") {
		t.Errorf("IDs: same %s, reordered %s, changed %s", id1, id2, id3)
	}
}

func TestBadInputIsRefused(t *testing.T) {
	cases := map[string]Image{
		"no name":         {Files: []File{Regular("/a", 0o644, nil)}},
		"digest name":     {Names: []string{"busybox@sha256:" + strings.Repeat("a", 64)}},
		"malformed name":  {Names: []string{"Busy Box"}},
		"duplicate path":  {Names: []string{"a:1"}, Files: []File{Regular("/a", 0o644, nil), Regular("a", 0o644, nil)}},
		"root":            {Names: []string{"a:1"}, Files: []File{Dir("/", 0o755)}},
		"symlink no dest": {Names: []string{"a:1"}, Files: []File{{Path: "/l", Mode: fs.ModeSymlink}}},
		"device":          {Names: []string{"a:1"}, Files: []File{{Path: "/dev/null", Mode: fs.ModeDevice}}},
	}
	for what, im := range cases {
		if err := im.WriteArchive(io.Discard, Docker); err == nil {
			t.Errorf("%s: no error", what)
		}
	}
}

func TestNormalizeNameAsContainerd(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                      "docker.io/library/busybox:latest",
		"registry.k8s.io/pause:3.10.2": "registry.k8s.io/pause:3.10.2",
		"localhost:5000/x":             "localhost:5000/x:latest",
	} {
		if got, err := NormalizeName(in); got != want || err != nil {
			t.Errorf("NormalizeName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func untar(t *testing.T, tarPath, dir string) {
	t.Helper()
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
