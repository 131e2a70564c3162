package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images the sig-node specs run, under upstream's names for v1.36
// (k8s.io/kubernetes/test/utils/image/manifest.go).
const (
	agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	// agnhostPrevImage is a stand-in: the same build under the previous
	// tag, which the Pod lifecycle spec only needs to run.
	agnhostPrevImage = "registry.k8s.io/e2e-test-images/agnhost:2.55"
	// nginxImage is a stand-in: agnhost's netexec serving HTTP on port 80,
	// nginx's port. The specs that name it only need a container that runs
	// and differs from agnhost (the image update spec) or serves HTTP on 80.
	nginxImage      = "registry.k8s.io/e2e-test-images/nginx:1.15-4"
	nonrootImage    = "registry.k8s.io/e2e-test-images/nonroot:1.5"
	nonewprivsImage = "registry.k8s.io/e2e-test-images/nonewprivs:1.4"
	// glibcDNSImage is a stand-in: busybox, whose hostname -f the hostname
	// override specs run, instead of Debian's glibc.
	glibcDNSImage = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"
	// kittenImage is a stand-in: agnhost's image with upstream's kitten
	// files and an /etc/os-release saying Alpine Linux, which upstream's
	// alpine base has and the ImageVolume spec reads.
	kittenImage = "registry.k8s.io/e2e-test-images/kitten:1.8"
	// nautilusImage is kitten's twin with upstream's nautilus files: the
	// kubectl Update Demo specs roll from one to the other.
	nautilusImage = "registry.k8s.io/e2e-test-images/nautilus:1.8"
	// nginxNewImage is a stand-in like nginxImage, a distinct image: the
	// apply and deployment specs only roll to it and read it back.
	nginxNewImage = "registry.k8s.io/e2e-test-images/nginx:1.27-0"
	// The Aggregator spec's pod: upstream's sample-apiserver (built here
	// from k8s.io/sample-apiserver of the suite's release, 0.36.3, under
	// the manifest's tag 1.29.2) and an etcd for it (etcd 3.6.8, from
	// go.etcd.io/etcd/server, as the manifest's 3.6.8-0).
	sampleAPIServerImage = "registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2"
	etcdImage            = "registry.k8s.io/etcd:3.6.8-0"
)

// netToolBinaries are Debian's dig, nslookup and host (bind9-dnsutils),
// curl and OpenBSD's nc (netcat-openbsd): upstream's agnhost has alpine's
// bind-tools, curl and netcat-openbsd, and glibc-dns-testing Debian's
// dnsutils. The specs run them with options busybox's stand-ins lack: the
// DNS probes' dig, curl --interface and --connect-timeout, nc -u. And
// glibc's getent, which busybox has no applet for: the DNS specs' /etc/hosts
// probes run `getent hosts NAME` (alpine's musl getent in upstream's agnhost,
// Debian's in glibc-dns-testing).
var netToolBinaries = []string{"/usr/bin/dig", "/usr/bin/nslookup", "/usr/bin/host", "/usr/bin/curl", "/bin/nc.openbsd", "/usr/bin/getent"}

// bashStaticBinary is Debian's bash-static, the sh of the images with
// network tools.
const bashStaticBinary = "/bin/bash-static"

// busyboxBinary is Debian's busybox-static, the shell and tools of agnhost's
// image (upstream bases it on alpine, whose sh, nc and friends are busybox
// too).
const busyboxBinary = "/bin/busybox"

// buildImages writes the tars of every image the specs need into cache and
// returns their paths: busybox and pause from podvisor's own recipes
// (test/images), agnhost and the nginx stand-in built here from upstream's
// agnhost sources. Each agnhost-based tar is named after the hash of what
// goes into it, so a re-run with unchanged inputs only checks that it exists.
func buildImages(repo, cache string, log io.Writer, wide bool) ([]string, error) {
	own := filepath.Join(cache, "podvisor-images")
	cmd := exec.Command("go", "run", "./test/images/build", "-o", own, "busybox", "pause")
	cmd.Dir = repo
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("podvisor's test images (go run ./test/images/build): %w", err)
	}
	tars := []string{filepath.Join(own, "busybox.tar"), filepath.Join(own, "pause.tar")}

	agnhost, err := goBinary(repo, cache, "agnhost", "k8s.io/kubernetes/test/images/agnhost", log)
	if err != nil {
		return nil, err
	}
	nnp, err := goBinary(repo, cache, "nnp", "k8s.io/kubernetes/test/images/nonewprivs", log)
	if err != nil {
		return nil, err
	}
	base, err := busyboxFiles()
	if err != nil {
		return nil, err
	}
	netTools, err := sharedBinaryFiles(netToolBinaries)
	if err != nil {
		return nil, fmt.Errorf("test images: %w (apt-get install bind9-dnsutils curl netcat-openbsd)", err)
	}
	withNetTools := maps.Clone(base)
	maps.Copy(withNetTools, netTools)
	// Before busybox's nc, wherever a PATH lookup would find that.
	// glibc without an nsswitch.conf asks DNS before /etc/hosts and stops
	// at its NXDOMAIN: a pod's own short name, which only its hosts file
	// has, would never resolve. Debian's order.
	withNetTools["etc/nsswitch.conf"] = file{mode: 0o644, data: []byte("hosts: files dns\n")}
	withNetTools["usr/bin/nc"] = file{link: "/bin/nc.openbsd"}
	withNetTools["bin/nc"] = file{link: "/bin/nc.openbsd"}
	// Debian's busybox sh runs its own applet for any name it has one for
	// (FEATURE_SH_STANDALONE), whatever PATH says: `sh -c 'nc -v …'`, the
	// Service specs' reachability check, ran busybox's nc, which has no
	// -v, -t or -u. Here sh is Debian's static bash (busybox's applets are
	// still found through PATH); the busybox image keeps busybox's sh,
	// whose error texts specs of its own expect.
	bash, err := os.ReadFile(bashStaticBinary)
	if err != nil {
		return nil, fmt.Errorf("test images: %w (apt-get install bash-static)", err)
	}
	withNetTools["bin/sh"] = file{mode: 0o755, data: bash}
	withNetTools["bin/bash"] = file{link: "/bin/sh"}
	agnhostLayer, err := agnhostFiles(withNetTools, agnhost)
	if err != nil {
		return nil, err
	}
	nnpBin, err := os.ReadFile(nnp)
	if err != nil {
		return nil, err
	}
	kittenLayer, err := demoFiles(agnhostLayer, "kitten")
	if err != nil {
		return nil, err
	}
	nautilusLayer, err := demoFiles(agnhostLayer, "nautilus")
	if err != nil {
		return nil, err
	}
	nnpLayer := maps.Clone(base)
	// Set-uid, as upstream's `chmod +s`: the specs check the effective uid.
	nnpLayer["usr/local/bin/nnp"] = file{mode: 0o6755, data: nnpBin}
	type image struct {
		refs  []string
		cfg   v1.Config
		files map[string]file
	}
	images := []image{
		// As upstream's Dockerfile: ENTRYPOINT ["/agnhost"], CMD ["pause"].
		{[]string{agnhostImage, agnhostPrevImage}, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}}, agnhostLayer},
		{[]string{nginxImage}, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"netexec", "--http-port=80", "--udp-port=-1"}}, agnhostLayer},
		// Upstream: alpine with USER 1234.
		{[]string{nonrootImage}, v1.Config{User: "1234"}, base},
		{[]string{nonewprivsImage}, v1.Config{Cmd: []string{"nnp"}}, nnpLayer},
		{[]string{glibcDNSImage}, v1.Config{}, withNetTools},
		// As upstream's Dockerfile: agnhost's entrypoint, CMD ["test-webserver"].
		{[]string{kittenImage}, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}}, kittenLayer},
		{[]string{nautilusImage}, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}}, nautilusLayer},
		{[]string{nginxNewImage}, v1.Config{Entrypoint: []string{"/agnhost"}, Cmd: []string{"netexec", "--http-port=80", "--udp-port=-1"},
			Env: []string{"NGINX_VERSION=1.27.0"}}, agnhostLayer},
	}
	if wide {
		// Only the whole suite's Aggregator spec runs these.
		sampleAPIServer, err := goBinary(repo, cache, "kube-sample-apiserver", "k8s.io/sample-apiserver", log)
		if err != nil {
			return nil, err
		}
		etcd, err := goBinary(repo, cache, "etcd", "go.etcd.io/etcd/server/v3", log)
		if err != nil {
			return nil, err
		}
		sa, err := os.ReadFile(sampleAPIServer)
		if err != nil {
			return nil, err
		}
		et, err := os.ReadFile(etcd)
		if err != nil {
			return nil, err
		}
		saLayer := maps.Clone(base)
		saLayer["kube-sample-apiserver"] = file{mode: 0o755, data: sa}
		etcdLayer := maps.Clone(base)
		etcdLayer["usr/local/bin/etcd"] = file{mode: 0o755, data: et}
		images = append(images,
			// As upstream's Dockerfile: ENTRYPOINT ["/kube-sample-apiserver"].
			image{[]string{sampleAPIServerImage}, v1.Config{Entrypoint: []string{"/kube-sample-apiserver"}}, saLayer},
			image{[]string{etcdImage}, v1.Config{Cmd: []string{"/usr/local/bin/etcd"}}, etcdLayer})
	}
	for _, im := range images {
		im.cfg.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, im.cfg.Env...)
		im.cfg.ExposedPorts = map[string]struct{}{}
		for _, p := range []string{"80", "8080", "8081", "9376", "5000"} {
			im.cfg.ExposedPorts[p+"/tcp"] = struct{}{}
		}
		p, err := cachedImage(cache, im.refs, im.cfg, im.files)
		if err != nil {
			return nil, err
		}
		tars = append(tars, p)
	}
	return tars, nil
}

// busyboxFiles is the base of the images built here, as alpine is
// upstream's: a shell and the usual tools (Debian's static busybox, applets
// in /bin and where busybox installs them), root's and nobody's accounts,
// and a curl.
func busyboxFiles() (map[string]file, error) {
	bb, err := os.ReadFile(busyboxBinary)
	if err != nil {
		return nil, fmt.Errorf("test images: %w (apt-get install busybox-static)", err)
	}
	applets, err := exec.Command(busyboxBinary, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("test images: %s --list-full: %w", busyboxBinary, err)
	}
	files := map[string]file{
		"tmp":         {mode: 0o1777, dir: true},
		"root":        {mode: 0o700, dir: true},
		"etc/passwd":  {mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
		"etc/group":   {mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\n")},
		"bin/busybox": {mode: 0o755, data: bb},
		// Hooks of the lifecycle specs run `curl URL`; busybox has no curl
		// but a wget that GETs the same way.
		"usr/bin/curl": {mode: 0o755, data: []byte(curlStandIn)},
		// Probe specs run scripts with /bin/bash, which upstream's agnhost
		// has (alpine's bash); busybox's ash runs those scripts.
		"bin/bash": {mode: 0o755, data: []byte("#!/bin/sh\n# podvisor conformance runner: a stand-in for bash, which busybox lacks.\nexec /bin/sh \"$@\"\n")},
	}
	for _, full := range strings.Fields(string(applets)) {
		applet := full[strings.LastIndexByte(full, '/')+1:]
		for _, p := range []string{"bin/" + applet, full} {
			if _, ok := files[p]; !ok {
				files[p] = file{link: "/bin/busybox"}
			}
		}
	}
	return files, nil
}

// agnhostFiles is the layer of upstream's agnhost image, as far as its
// Dockerfile matters to the specs: base plus /agnhost and the /agnhost-2
// link the entrypoint specs use, /uploads for netexec, porter's
// certificate, and the user and group a SupplementalGroups spec expects in
// the image.
func agnhostFiles(base map[string]file, agnhost string) (map[string]file, error) {
	bin, err := os.ReadFile(agnhost)
	if err != nil {
		return nil, err
	}
	src := filepath.Join(moduleCacheDir(), "k8s.io", "kubernetes@v1.36.3", "test", "images", "agnhost", "porter")
	crt, err := os.ReadFile(filepath.Join(src, "localhost.crt"))
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(filepath.Join(src, "localhost.key"))
	if err != nil {
		return nil, err
	}
	files := maps.Clone(base)
	for p, f := range map[string]file{
		"agnhost":       {mode: 0o755, data: bin},
		"agnhost-2":     {link: "agnhost"},
		"localhost.crt": {mode: 0o644, data: crt},
		"localhost.key": {mode: 0o600, data: key},
		"uploads":       {mode: 0o755, dir: true},
		"etc/passwd": {mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\n" +
			"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/:/bin/false\n")},
		"etc/group": {mode: 0o644, data: []byte("root:x:0:\nuser-defined-in-image:x:1000:\n" +
			"group-defined-in-image:x:50000:user-defined-in-image\nnobody:x:65534:\n")},
		"home/user-defined-in-image": {mode: 0o755, dir: true, uid: 1000, gid: 1000},
	} {
		files[p] = f
	}
	return files, nil
}

// demoFiles is the layer of upstream's kitten or nautilus image: agnhost's
// with /NAME.jpg and /data.json from upstream's test/images/NAME/html,
// plus the /etc/os-release of its alpine base.
func demoFiles(agnhost map[string]file, name string) (map[string]file, error) {
	src := filepath.Join(moduleCacheDir(), "k8s.io", "kubernetes@v1.36.3", "test", "images", name, "html")
	files := maps.Clone(agnhost)
	for _, f := range []string{name + ".jpg", "data.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return nil, err
		}
		files[f] = file{mode: 0o644, data: b}
	}
	files["etc/os-release"] = file{mode: 0o644, data: []byte(alpineOSRelease)}
	return files, nil
}

// goBinary builds a static binary of pkg (a main package of this module's
// dependencies) into cache/name.
func goBinary(repo, cache, name, pkg string, log io.Writer) (string, error) {
	out := filepath.Join(cache, name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = moduleDir(repo)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	return out, nil
}

// sharedBinaryFiles are dynamically linked binaries of this machine with
// every library ldd finds for them, each at its path, and the ELF
// interpreter: enough to run them in an image of their own.
func sharedBinaryFiles(bins []string) (map[string]file, error) {
	files := map[string]file{}
	add := func(p string) error {
		b, err := os.ReadFile(p) // through symlinks: the library itself
		if err != nil {
			return err
		}
		files[strings.TrimPrefix(p, "/")] = file{mode: 0o755, data: b}
		return nil
	}
	for _, bin := range bins {
		if err := add(bin); err != nil {
			return nil, err
		}
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", bin, err)
		}
		if strings.Contains(string(out), "not found") {
			return nil, fmt.Errorf("ldd %s: a library is missing:\n%s", bin, out)
		}
		for _, lib := range lddPaths(string(out)) {
			if err := add(lib); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

// lddPaths are the absolute paths of ldd's output: "name => /path (addr)"
// and the interpreter's "/path (addr)".
func lddPaths(out string) []string {
	var paths []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			paths = append(paths, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			paths = append(paths, f[0])
		}
	}
	return paths
}

// alpineOSRelease is what upstream's alpine base says of itself; the runner's
// busybox base stands in for it.
const alpineOSRelease = `NAME="Alpine Linux"
ID=alpine
VERSION_ID=3.21.3
PRETTY_NAME="Alpine Linux v3.21 (podvisor conformance stand-in: Debian's busybox)"
HOME_URL="https://alpinelinux.org/"
`

// curlStandIn GETs its last argument and prints the body, which is all the
// selected specs ask of curl.
const curlStandIn = `#!/bin/sh
# podvisor conformance runner: a stand-in for curl, which busybox lacks.
for a; do url=$a; done
exec wget -q -O - "$url"
`

// file is one entry of a built layer, by its path without the leading /.
type file struct {
	mode     int64
	data     []byte
	link     string
	dir      bool
	uid, gid int
}

// cachedImage returns the docker-archive tar of the image made of files and
// cfg, tagged with every one of refs,
// writing it the first time.
func cachedImage(cache string, refs []string, cfg v1.Config, files map[string]file) (string, error) {
	ref := refs[0]
	layer, err := layerTar(files)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%q\n%q\n%q\n%v\n%s\n", refs, cfg.Entrypoint, cfg.Cmd, cfg.Env, cfg.User)
	h.Write(layer)
	short := ref[strings.LastIndexByte(ref, '/')+1:]
	p := filepath.Join(cache, fmt.Sprintf("%s-%x.tar", strings.ReplaceAll(short, ":", "-"), h.Sum(nil)[:8]))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer)), nil
	})
	if err != nil {
		return "", err
	}
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: runtime.GOARCH, OS: "linux", Created: epoch, Config: cfg,
	})
	if err != nil {
		return "", err
	}
	img, err = mutate.Append(img, mutate.Addendum{Layer: l,
		History: v1.History{Created: epoch, CreatedBy: "podvisor conformance runner"}})
	if err != nil {
		return "", err
	}
	// Written beside and renamed: a half-written tar is never found.
	tmp := fmt.Sprintf("%s.%d", p, os.Getpid())
	tagged := map[name.Reference]v1.Image{}
	for _, r := range refs {
		tag, err := name.NewTag(r)
		if err != nil {
			return "", err
		}
		tagged[tag] = img
	}
	if err := tarball.MultiRefWriteToFile(tmp, tagged); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	return p, os.Rename(tmp, p)
}

// layerTar writes files as a tar, sorted, with every time at the epoch, so
// the same files give the same bytes; parent directories nobody listed are
// added.
func layerTar(files map[string]file) ([]byte, error) {
	all := map[string]file{}
	for p, f := range files {
		all[p] = f
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			if _, ok := files[d]; !ok {
				all[d] = file{mode: 0o755, dir: true}
			}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := all[p]
		hdr := &tar.Header{Name: p, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: time.Unix(0, 0)}
		switch {
		case f.dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
		case f.link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.link, 0o777
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// moduleCacheDir is GOMODCACHE, where the kubernetes module's sources are.
func moduleCacheDir() string {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return filepath.Join(os.Getenv("HOME"), "go", "pkg", "mod")
	}
	return strings.TrimSpace(string(out))
}
