package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needMultiNode skips where the multi-node tests cannot run: they make
// network namespaces and a bridge (root) and run agents on containerd.
func needMultiNode(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the multi-node tests make network namespaces and a bridge: they need root")
	}
	if e2eRuntime() != "containerd" {
		t.Skip("the multi-node tests run agents on the containerd runtime (pod network across nodes); PODVISOR_E2E_RUNTIME=" + e2eRuntime())
	}
	needContainerd(t)
}

// The lab itself: every machine reaches the bridge's address and the other
// machines, and a process started with ip netns exec is the command itself
// (so that SIGTERM reaches it), inside the machine's namespace.
func TestMultiNodeLab(t *testing.T) {
	needMultiNode(t)
	lab := newNetLab(t, 2)
	l, err := net.Listen("tcp", net.JoinHostPort(lab.gateway.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "bridge") })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	for i := range lab.hosts {
		out, err := lab.exec(i, "curl", "-sS", "-m", "5", fmt.Sprintf("http://%s/", l.Addr()))
		if err != nil || out != "bridge" {
			t.Errorf("machine %d → bridge address: %q, %v", i+1, out, err)
		}
		route, _ := lab.exec(i, "ip", "route", "show", "default")
		if !strings.Contains(route, "via "+lab.gateway.String()+" dev eth0") {
			t.Errorf("machine %d default route: %q", i+1, route)
		}
	}

	// Machine 2 serves, machine 1 fetches: the bridge forwards between ports.
	www := t.TempDir()
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte("machine 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	httpd := exec.Command("ip", "netns", "exec", lab.hosts[1].NS, "busybox", "httpd", "-f", "-p", fmt.Sprint(port), "-h", www)
	if err := httpd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = httpd.Wait(); close(exited) }()
	t.Cleanup(func() { terminate(httpd, exited) })
	url := fmt.Sprintf("http://%s/", net.JoinHostPort(lab.hosts[1].Addr.String(), fmt.Sprint(port)))
	Eventually(t, 10*time.Second, "machine 1 → machine 2", func() (bool, error) {
		out, err := lab.exec(0, "curl", "-sS", "-m", "2", url)
		return err == nil && out == "machine 2", fmt.Errorf("%q: %v", out, err)
	})
	// httpd answers, so ip has exec'd it by now.
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", httpd.Process.Pid)); err != nil || filepath.Base(exe) != "busybox" {
		t.Errorf("ip netns exec did not exec its command: pid %d is %q (%v)", httpd.Process.Pid, exe, err)
	}
	// From the root namespace, machine 2 is reached through the bridge too.
	if _, err := exec.Command("curl", "-sS", "-m", "5", url).Output(); err != nil {
		t.Errorf("root namespace → machine 2: %v", err)
	}
}
