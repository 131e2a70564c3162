package cri

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
	"github.com/podvisor/podvisor/internal/runtime/pause"
	"github.com/podvisor/podvisor/test/images"
)

// A containerd binary instead of the embedded one, when asked for:
//
//	PODVISOR_TEST_CONTAINERD=containerd            # the one in PATH (Debian's 1.6)
//	PODVISOR_TEST_CONTAINERD_DIR=/opt/containerd2  # containerd, ctr, containerd-shim-runc-v2
//
// Its config is written here, for 1.x (version 2) or 2.x (version 3); ctr
// imports the images.
const (
	containerdEnv    = "PODVISOR_TEST_CONTAINERD"
	containerdDirEnv = "PODVISOR_TEST_CONTAINERD_DIR"
)

func external() bool {
	return os.Getenv(containerdEnv) != "" || os.Getenv(containerdDirEnv) != ""
}

// binary is a containerd run from its own binary.
type binary struct {
	c        *testContainerd
	sock     string
	cmd      *exec.Cmd
	exited   chan struct{}
	bin, ctr string // containerd and ctr
	shim     string // containerd 2.x: its runc shim
	major    int    // containerd's major version
}

func startExternal(c *testContainerd) (daemon, error) {
	b := &binary{c: c, bin: os.Getenv(containerdEnv), ctr: "ctr"}
	if dir := os.Getenv(containerdDirEnv); dir != "" {
		b.bin, b.shim = filepath.Join(dir, "containerd"), filepath.Join(dir, "containerd-shim-runc-v2")
		if _, err := os.Stat(filepath.Join(dir, "ctr")); err == nil {
			b.ctr = filepath.Join(dir, "ctr")
		}
	}
	for _, bin := range []string{b.bin, b.ctr} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s asked for but not found (Debian: apt-get install containerd): %w", bin, err)
		}
	}
	out, err := exec.Command(b.bin, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", b.bin, err)
	}
	b.major = 1
	if strings.Contains(string(out), "containerd/v2 ") {
		b.major = 2
		if b.shim == "" {
			b.shim = filepath.Join(filepath.Dir(b.bin), "containerd-shim-runc-v2")
		}
	}
	b.sock = filepath.Join(c.dir, "c.sock") // a unix socket path has at most 108 bytes
	c.endpoint = "unix://" + b.sock
	c.log = filepath.Join(c.dir, "containerd.log")
	if err := b.writeConfig(); err != nil {
		return nil, err
	}
	if err := b.start(); err != nil {
		return nil, err
	}
	if err := b.importImages(); err != nil {
		return b, err
	}
	return b, nil
}

func (b *binary) writeConfig() error {
	cni := filepath.Join(b.c.dir, "cni")
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
`, testBridge, filepath.Join(b.c.dir, "ipam"), b.c.podCIDR.String())
	if err := os.WriteFile(filepath.Join(cni, "10-podvisor.conflist"), []byte(conflist), 0o644); err != nil {
		return err
	}
	if b.major >= 2 {
		return os.WriteFile(filepath.Join(b.c.dir, "config.toml"), []byte(b.configV2(cni)), 0o644)
	}
	cfg := b.configHeader(2) + fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
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
	return os.WriteFile(filepath.Join(b.c.dir, "config.toml"), []byte(cfg), 0o644)
}

// configV2 is the config of containerd 2.x: the CRI's settings split over
// its images and runtime plugins, the sandbox image pinned.
func (b *binary) configV2(cni string) string {
	return b.configHeader(3) + fmt.Sprintf(`[plugins."io.containerd.nri.v1.nri"]
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
`, pause.ImageName, cni, b.shim, filepath.Join(b.c.dir, "state", "runc"))
}

// configHeader is what every config version shares: root, state and
// sockets in the test's directory.
func (b *binary) configHeader(version int) string {
	return fmt.Sprintf(`version = %d
root = %q
state = %q

[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, version, filepath.Join(b.c.dir, "root"), filepath.Join(b.c.dir, "state"), b.sock, b.sock+".ttrpc", filepath.Join(b.c.dir, "opt"))
}

// start starts containerd and waits until it listens.
func (b *binary) start() error {
	os.Remove(b.sock)
	logf, err := os.OpenFile(b.c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	b.cmd = exec.Command(b.bin, "--config", filepath.Join(b.c.dir, "config.toml"))
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	b.exited = exited
	cmd := b.cmd
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(b.sock); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("containerd exited: %s", tail(b.c.log))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd did not listen within 30s: %s", tail(b.c.log))
		}
	}
}

func (b *binary) stop() error {
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
		return nil
	case <-time.After(15 * time.Second):
		b.cmd.Process.Kill()
		<-b.exited
		return fmt.Errorf("containerd did not stop on SIGTERM within 15s: killed")
	}
}

func (b *binary) close() {
	if b.cmd != nil && b.cmd.Process != nil {
		b.stop()
	}
}

// importImages imports the pause image and busybox, both built offline by
// test/images, into CRI's namespace.
func (b *binary) importImages() error {
	for _, name := range []string{"pause", "busybox"} {
		tarPath, err := images.WriteTar(b.c.dir, name, imagebuild.Docker)
		if err != nil {
			return err
		}
		out, err := exec.Command(b.ctr, "-a", b.sock, "-n", "k8s.io", "images", "import", tarPath).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s: %v: %s", name, err, out)
		}
	}
	return nil
}
