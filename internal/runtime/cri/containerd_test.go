package cri

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/imagebuild"
	"github.com/podvisor/podvisor/internal/pause"
	"github.com/podvisor/podvisor/test/images"
)

// A private containerd for the integration tests: its own root, state,
// socket, CNI config and bridge; never the system's /run/containerd. One
// is started for the package run (lazily, by the first test that needs it)
// and stopped by TestMain.
type testContainerd struct {
	dir      string
	sock     string
	endpoint string
	cmd      *exec.Cmd
	exited   chan struct{}
	podCIDR  netip.Prefix
	bin, ctr string // containerd and ctr
	shim     string // containerd 2.x: its runc shim
	major    int    // containerd's major version
	err      error  // why there is none: the tests skip with it
}

var (
	sharedOnce sync.Once
	shared     *testContainerd
)

const (
	testBridge    = "pvcritest0"
	testPodCIDR   = "10.213.7.0/24"
	busyboxImage  = images.BusyboxLatestImage
	containerdBin = "containerd"
	// containerdDirEnv names a directory with another containerd (e.g.
	// 2.x: containerd, ctr, containerd-shim-runc-v2) to test against
	// instead of the one on PATH.
	containerdDirEnv = "PODVISOR_TEST_CONTAINERD_DIR"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if code != 0 && shared.dir != "" {
			// The directory goes; its log is what explains a failure.
			kept := filepath.Join(os.TempDir(), "podvisor-cri-test-containerd.log")
			if b, err := os.ReadFile(filepath.Join(shared.dir, "containerd.log")); err == nil && os.WriteFile(kept, b, 0o644) == nil {
				fmt.Fprintf(os.Stderr, "containerd's log: %s\n", kept)
			}
		}
		shared.stop()
	}
	os.Exit(code)
}

// needContainerd returns the shared containerd, or skips the test with the
// reason there is none.
func needContainerd(t *testing.T) *testContainerd {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: not with -short")
	}
	sharedOnce.Do(func() { shared = startContainerd() })
	if shared.err != nil {
		t.Skipf("no containerd for the integration tests: %v", shared.err)
	}
	return shared
}

func startContainerd() *testContainerd {
	c := &testContainerd{podCIDR: netip.MustParsePrefix(testPodCIDR)}
	if os.Geteuid() != 0 {
		c.err = fmt.Errorf("not root")
		return c
	}
	c.bin, c.ctr, c.shim = containerdBin, "ctr", ""
	if dir := os.Getenv(containerdDirEnv); dir != "" {
		c.bin, c.shim = filepath.Join(dir, "containerd"), filepath.Join(dir, "containerd-shim-runc-v2")
		if _, err := os.Stat(filepath.Join(dir, "ctr")); err == nil {
			c.ctr = filepath.Join(dir, "ctr")
		}
	}
	for _, bin := range []string{c.bin, c.ctr, "runc", "/usr/lib/cni/bridge"} {
		if _, err := exec.LookPath(bin); err != nil {
			c.err = fmt.Errorf("%s not installed (apt-get install containerd runc containernetworking-plugins): %w", bin, err)
			return c
		}
	}
	out, err := exec.Command(c.bin, "--version").Output()
	if err != nil {
		c.err = fmt.Errorf("%s --version: %w", c.bin, err)
		return c
	}
	c.major = 1
	if strings.Contains(string(out), "containerd/v2 ") {
		c.major = 2
		if c.shim == "" {
			c.shim = filepath.Join(filepath.Dir(c.bin), "containerd-shim-runc-v2")
		}
	}
	dir, err := os.MkdirTemp("", "pvcri")
	if err != nil {
		c.err = err
		return c
	}
	c.dir = dir
	c.sock = filepath.Join(dir, "c.sock") // a unix socket path has at most 108 bytes
	c.endpoint = "unix://" + c.sock
	if err := c.writeConfig(); err != nil {
		c.err = err
		return c
	}
	if c.err = c.launch(); c.err != nil {
		return c
	}
	if err := c.importImages(); err != nil {
		c.err = err
	}
	return c
}

func (c *testContainerd) writeConfig() error {
	cni := filepath.Join(c.dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		return err
	}
	conflist := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "podvisor-cri-test",
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
`, testBridge, filepath.Join(c.dir, "ipam"), c.podCIDR.String())
	if err := os.WriteFile(filepath.Join(cni, "10-podvisor.conflist"), []byte(conflist), 0o644); err != nil {
		return err
	}
	if c.major >= 2 {
		return os.WriteFile(filepath.Join(c.dir, "config.toml"), []byte(c.configV2(cni)), 0o644)
	}
	cfg := c.configHeader(2) + fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[1]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[2]q
`, pause.ImageName, cni)
	return os.WriteFile(filepath.Join(c.dir, "config.toml"), []byte(cfg), 0o644)
}

// configV2 is the config of containerd 2.x: the CRI's settings split over
// its images and runtime plugins, the sandbox image pinned.
func (c *testContainerd) configV2(cni string) string {
	return c.configHeader(3) + fmt.Sprintf(`[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[1]q
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %[3]q
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = %[4]q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %[2]q
`, pause.ImageName, cni, c.shim, filepath.Join(c.dir, "state", "runc"))
}

// configHeader is what every config version shares: root, state and
// sockets in the test's directory.
func (c *testContainerd) configHeader(version int) string {
	return fmt.Sprintf(`version = %d
root = %q
state = %q

[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, version, filepath.Join(c.dir, "root"), filepath.Join(c.dir, "state"), c.sock, c.sock+".ttrpc", filepath.Join(c.dir, "opt"))
}

// launch starts containerd and waits until it listens.
func (c *testContainerd) launch() error {
	os.Remove(c.sock)
	logf, err := os.OpenFile(filepath.Join(c.dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	c.cmd = exec.Command(c.bin, "--config", filepath.Join(c.dir, "config.toml"))
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	c.exited = exited
	cmd := c.cmd
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(c.sock); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("containerd exited: %s", tail(filepath.Join(c.dir, "containerd.log")))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd did not listen within 30s: %s", tail(filepath.Join(c.dir, "containerd.log")))
		}
	}
}

// terminate stops containerd as a service manager would; the shims, and
// with them the containers, keep running.
func (c *testContainerd) terminate() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
	}
}

// importImages imports the pause image and busybox, both built offline by
// test/images, into CRI's namespace.
func (c *testContainerd) importImages() error {
	for _, name := range []string{"pause", "busybox"} {
		tarPath, err := images.WriteTar(c.dir, name, imagebuild.Docker)
		if err != nil {
			return err
		}
		out, err := exec.Command(c.ctr, "-a", c.sock, "-n", "k8s.io", "images", "import", tarPath).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s: %v: %s", name, err, out)
		}
	}
	return nil
}

// stop removes every sandbox (so no container outlives the test run),
// stops containerd, and removes what it left.
func (c *testContainerd) stop() {
	if c.cmd == nil || c.cmd.Process == nil {
		c.cleanDir()
		return
	}
	if c.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if r, err := New(ctx, Config{Endpoint: c.endpoint, StateDir: filepath.Join(c.dir, "agent")}); err == nil {
			list, _ := r.rs.ListPodSandbox(quiet(ctx), nil)
			for _, s := range list {
				r.rs.StopPodSandbox(quiet(ctx), s.Id)
				r.rs.RemovePodSandbox(quiet(ctx), s.Id)
			}
			r.Close()
		}
		cancel()
	}
	c.terminate()
	exec.Command("ip", "link", "del", testBridge).Run()
	c.cleanDir()
}

// cleanDir unmounts what containerd left mounted under its directory, then
// removes it.
func (c *testContainerd) cleanDir() {
	if c.dir == "" {
		return
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], c.dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	slices.Sort(mounts)
	for _, m := range slices.Backward(mounts) {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
	os.RemoveAll(c.dir)
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
