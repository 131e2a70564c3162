package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/cli/service"
)

// install --print shows the unit: this binary, the flags given, the data
// dir absolute; on a machine without systemd, install says so and writes
// nothing.
func TestInstallPrint(t *testing.T) {
	processRuntimeOnly(t)
	t.Parallel()
	out, stderr, code := runPodvisor(t, time.Minute, "install", "--print", "up", "--api-port", "7443", "--data-dir", "rel/dir")
	if code != 0 {
		t.Fatalf("install --print: exit %d: %s", code, stderr)
	}
	wd, _ := os.Getwd()
	want := "ExecStart=" + binary + " up --data-dir " + filepath.Join(wd, "rel/dir") + " --api-port 7443"
	if !strings.Contains(out, want) || !strings.Contains(out, "Type=notify\n") || !strings.Contains(out, "KillMode=process\n") {
		t.Errorf("unit lacks %q or k3s's service settings:\n%s", want, out)
	}
	if service.Running() {
		return
	}
	unitDir := t.TempDir()
	_, stderr, code = runPodvisor(t, time.Minute, "install", "--unit-dir", unitDir, "up")
	if code == 0 || !strings.Contains(stderr, "systemd is not running") {
		t.Errorf("install without systemd: exit %d, %q; want the reason", code, stderr)
	}
	if entries, _ := os.ReadDir(unitDir); len(entries) != 0 {
		t.Errorf("install without systemd wrote %v", entries)
	}
}

// A podvisor under systemd's Type=notify: READY=1 arrives once the node is
// Ready, STOPPING=1 when it stops.
func TestReadinessNotification(t *testing.T) {
	processRuntimeOnly(t)
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p := NewPodvisor(t)
	p.Runtime = "process"
	p.Env = []string{"NOTIFY_SOCKET=" + sock}
	got := make(chan string, 4)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(got)
				return
			}
			got <- string(buf[:n])
		}
	}()
	p.Start()
	var msg string
	select {
	case msg = <-got:
	case <-time.After(time.Minute):
		t.Fatal("no notification within 1m of the ready line")
	}
	// Only podvisor's: the embedded API server's own early READY=1 must
	// not reach systemd.
	if want := "READY=1\nSTATUS=node " + p.NodeName + " is Ready"; msg != want {
		t.Fatalf("first notification %q, want %q", msg, want)
	}
	n, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
	if err != nil || !nodeReady(n) {
		t.Fatalf("READY=1 sent while node %s is not Ready (%v)", p.NodeName, err)
	}
	p.Stop()
	select {
	case msg = <-got:
		if msg != "STOPPING=1" {
			t.Errorf("notification at stop %q, want STOPPING=1", msg)
		}
	case <-time.After(10 * time.Second):
		t.Error("no STOPPING=1 at stop")
	}
}

// install and uninstall where systemd runs the machine: the service starts,
// the node is Ready, uninstall stops it, removes the unit and (with
// --remove-data) the data dir.
func TestInstallUnderSystemd(t *testing.T) {
	if !service.Running() {
		t.Skip("systemd is not running on this machine (no /run/systemd/system): podvisor install needs it")
	}
	if b, _ := os.ReadFile("/proc/1/comm"); strings.TrimSpace(string(b)) != "systemd" {
		t.Skip("PID 1 is not systemd")
	}
	if _, err := os.Stat(filepath.Join(service.UnitDir, service.Name("up"))); err == nil {
		t.Skip("a podvisor.service is installed on this machine already: not touching it")
	}
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"install", "up", "--data-dir", data, "--api-port", itoa(freePort(t)), "--agent-port", itoa(freePort(t)),
		"--etcd-client-port", itoa(freePort(t)), "--etcd-peer-port", itoa(freePort(t)), "--node-name", "installed",
		"--runtime", "process", "--disable-metrics-server"}
	out, stderr, code := runPodvisor(t, 5*time.Minute, args...)
	t.Cleanup(func() { runPodvisor(t, 5*time.Minute, "uninstall", "--remove-data") })
	if code != 0 {
		t.Fatalf("podvisor install: exit %d\n%s%s", code, out, stderr)
	}
	if b, err := exec.Command("systemctl", "is-active", service.Name("up")).Output(); strings.TrimSpace(string(b)) != "active" {
		t.Fatalf("systemctl is-active: %q, %v", b, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(data, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	c := kubernetes.NewForConfigOrDie(cfg)
	// Type=notify: systemctl returned once podvisor said it was ready.
	n, err := c.CoreV1().Nodes().Get(context.Background(), "installed", metav1.GetOptions{})
	if err != nil || !nodeReady(n) {
		t.Fatalf("node not Ready once install returned: %v", err)
	}
	out, stderr, code = runPodvisor(t, 5*time.Minute, "uninstall", "--remove-data")
	if code != 0 {
		t.Fatalf("podvisor uninstall: exit %d\n%s%s", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(service.UnitDir, service.Name("up"))); !os.IsNotExist(err) {
		t.Errorf("unit file still there: %v", err)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("data dir still there after --remove-data: %v", err)
	}
}
