package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
)

// privateContainerd runs Debian's containerd (1.6) on a socket and root of
// its own, so the test touches no system containerd, and returns the socket.
func privateContainerd(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	for _, bin := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no %s (apt-get install containerd runc)", bin)
		}
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	// No CRI plugin: this test needs images and tasks, not CNI.
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	daemon := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	daemon.Stdout, daemon.Stderr = logFile, logFile
	daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Tasks a failed test left would keep their shims and mounts.
		out, _ := ctr(sock, "tasks", "ls", "-q")
		for _, id := range strings.Fields(out) {
			ctr(sock, "tasks", "kill", "-s", "SIGKILL", id)
			ctr(sock, "tasks", "delete", "-f", id)
			ctr(sock, "containers", "delete", id)
		}
		daemon.Process.Signal(syscall.SIGTERM)
		daemon.Wait()
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("containerd log:\n%s", log)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := ctr(sock, "version"); err == nil {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd did not answer on its socket within 30 s")
		}
	}
}

func TestContainerdImportsAndRunsTheImages(t *testing.T) {
	sock := privateContainerd(t)
	ociBusybox, err := WriteTar(t.TempDir(), "busybox", imagebuild.OCI)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{Build(t, "busybox"), Build(t, "testserver"), Build(t, "testserver-sigusr1"),
		Build(t, "testserver-nonroot"), Build(t, "pause"), ociBusybox} {
		if out, err := ctr(sock, "images", "import", p); err != nil {
			t.Fatalf("import %s: %v\n%s", p, err, out)
		}
	}
	out, err := ctr(sock, "images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	listed := strings.Fields(out)
	for _, ref := range []string{BusyboxImage, BusyboxLatestImage, TestserverImage, TestserverSIGUSR1Image, TestserverNonRootImage, PauseImage} {
		if !slices.Contains(listed, ref) {
			t.Errorf("ctr images ls does not list %s: %q", ref, listed)
		}
	}
	if t.Failed() {
		return
	}

	t.Run("busybox runs a shell script as root with its users", func(t *testing.T) {
		out, err := ctr(sock, "run", "--rm", BusyboxImage, "bb1", "sh", "-c", "echo hello; id -un; stat -c %a /tmp; id -u nobody; id -g user")
		if want := "hello\nroot\n1777\n65534\n1000\n"; err != nil || out != want {
			t.Errorf("busybox: %v, output %q, want %q", err, out, want)
		}
	})
	t.Run("testserver runs as the image's user and exits with the code asked", func(t *testing.T) {
		out, err := ctr(sock, "run", "--rm", TestserverNonRootImage, "ts1", "/testserver", "entrypoint-tester", "x")
		if err != nil || !strings.Contains(out, "argv[2]=x\nuid=1000 gid=1000\n") {
			t.Errorf("entrypoint-tester: %v, output %q", err, out)
		}
		out, err = ctr(sock, "run", "--rm", TestserverImage, "ts2", "/testserver", "fail", "7")
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
			t.Errorf("fail 7: %v, output %q; want exit code 7", err, out)
		}
	})
	t.Run("pause runs until SIGTERM and exits 0", func(t *testing.T) {
		// ctr run exits with the task's exit code, as "fail 7" above shows.
		run := ctrCommand(sock, "run", "--rm", PauseImage, "p1")
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		waitTask(t, sock, "RUNNING")
		if out, err := ctr(sock, "tasks", "kill", "-s", "SIGTERM", "p1"); err != nil {
			t.Fatalf("kill: %v\n%s", err, out)
		}
		if err := run.Wait(); err != nil {
			t.Errorf("pause ended with %v on SIGTERM, want exit 0", err)
		}
	})
}

// waitTask waits until the only task is in state (as ctr tasks ls shows it).
func waitTask(t *testing.T, sock, state string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, _ := ctr(sock, "tasks", "ls")
		if strings.Contains(out, state) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no task became %s: %s", state, out)
		}
	}
}

// ctr runs ctr against the private containerd in the k8s.io namespace, the
// one CRI sees.
func ctr(sock string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"-a", sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// ctrCommand is ctr as a command to start and wait for.
func ctrCommand(sock string, args ...string) *exec.Cmd {
	return exec.Command("ctr", append([]string{"-a", sock, "-n", "k8s.io"}, args...)...)
}
