package e2e

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// daemon is a long-running podvisor command (server or agent) started by a test.
type daemon struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
}

// startDaemon runs podvisor with args (prefixed by wrap, e.g. `ip netns exec
// NS`), waits for a stdout line starting with ready and stops it (SIGTERM)
// when the test ends.
func startDaemon(t *testing.T, wrap []string, ready string, args ...string) *daemon {
	t.Helper()
	argv := append(append(append([]string{}, wrap...), binary), args...)
	d := &daemon{cmd: exec.Command(argv[0], argv[1:]...), stderr: &syncBuffer{}, exited: make(chan struct{})}
	d.cmd.Stderr = d.stderr
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(d.Stop)
	lines := make(chan string, 4)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, ready) {
			t.Fatalf("podvisor %v: first line %q, want %q…; stderr:\n%s", args, line, ready, d.stderr)
		}
	case <-d.exited:
		t.Fatalf("podvisor %v exited before ready; stderr:\n%s", args, d.stderr)
	case <-time.After(3 * time.Minute):
		t.Fatalf("podvisor %v not ready after 3m; stderr:\n%s", args, d.stderr)
	}
	return d
}

// Stop sends SIGTERM and waits (a minute, then kills).
func (d *daemon) Stop() { terminate(d.cmd, d.exited) }

// leafSerial reads the serial of the first certificate in a PEM file.
func leafSerial(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			t.Fatalf("%s: no certificate", path)
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c.SerialNumber.String()
		}
	}
}

// TestJoinByTokenRotatesCertificates joins an agent to a podvisor server with
// a token (the kubelet's TLS bootstrap), then checks that the node renews its
// client and serving certificates before they expire (node certificates last
// 3 minutes here, so renewal comes after 0.6 to 2.2 minutes: the signer
// backdates them 5 minutes and the node renews at 70-90% of their life),
// stays Ready through it, and that the API server still reaches its agent
// API (logs) over the renewed, verified serving certificate. A restart needs
// no token.
//
// Runs on the process runtime (in the process half of CI): what it tests is
// the same on both runtimes.
func TestJoinByTokenRotatesCertificates(t *testing.T) {
	if e2eRuntime() != "process" {
		t.Skip("runtime-independent; runs in the process-runtime e2e run")
	}
	serverDir, agentDir := t.TempDir(), t.TempDir()
	// Containers outlive their agent by design: kill them once it stopped.
	t.Cleanup(func() { killLeftovers(agentDir) })
	api := freePort(t)
	startDaemon(t, nil, "podvisor server is ready", "server", "--data-dir", serverDir, "--api-port", fmt.Sprint(api),
		"--bind-address", "127.0.0.1", "--etcd-client-port", fmt.Sprint(freePort(t)), "--etcd-peer-port", fmt.Sprint(freePort(t)),
		"--cluster-signing-duration", "3m")
	stdout, stderr, code := runPodvisor(t, 30*time.Second, "token", "create", "--data-dir", serverDir, "--ttl", "10m", "--print-join-command")
	if code != 0 {
		t.Fatalf("token create: exit %d: %s", code, stderr)
	}
	join := strings.Fields(stdout)
	if len(join) != 8 || join[1] != "agent" || join[2] != "--server" || join[3] != fmt.Sprintf("https://127.0.0.1:%d", api) {
		t.Fatalf("join command %q", stdout)
	}
	agentArgs := append(join[1:], "--node-name", "joined", "--data-dir", agentDir, "--runtime", "process", "--agent-port", fmt.Sprint(freePort(t)))
	agent := startDaemon(t, nil, "podvisor agent is ready: node joined", agentArgs...)

	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(serverDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(rc)
	ctx := context.Background()
	pki := filepath.Join(agentDir, "pki")
	client0 := leafSerial(t, filepath.Join(pki, "kubelet-client-current.pem"))
	// The serving certificate follows the node's registration (its CSR names
	// the Node's addresses, which the approver checks).
	Eventually(t, time.Minute, "serving certificate issued", func() (bool, error) {
		_, err := os.Stat(filepath.Join(pki, "kubelet-server-current.pem"))
		return err == nil, err
	})
	serving0 := leafSerial(t, filepath.Join(pki, "kubelet-server-current.pem"))

	// The bootstrap CSR came from the token's user and was approved by the
	// controller manager; the serving one from the node, approved by the server.
	csrs, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bootstrapped, served bool
	for _, c := range csrs.Items {
		approved := false
		for _, cond := range c.Status.Conditions {
			approved = approved || cond.Type == certificatesv1.CertificateApproved
		}
		bootstrapped = bootstrapped || (approved && c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && strings.HasPrefix(c.Spec.Username, "system:bootstrap:"+strings.Split(join[5], ".")[0]))
		served = served || (approved && c.Spec.SignerName == certificatesv1.KubeletServingSignerName && c.Spec.Username == "system:node:joined")
	}
	if !bootstrapped || !served {
		t.Fatalf("CSRs: bootstrap client approved %v, serving approved %v; all: %+v", bootstrapped, served, csrs.Items)
	}

	ns := "default"
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rotation"}, Spec: v1.PodSpec{NodeName: "joined", Containers: []v1.Container{{
		Name: "c", Image: "busybox", Command: []string{"sh", "-c", "echo still here; sleep 600"}}}}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 4*time.Minute, "client and serving certificates renewed", func() (bool, error) {
		return leafSerial(t, filepath.Join(pki, "kubelet-client-current.pem")) != client0 &&
			leafSerial(t, filepath.Join(pki, "kubelet-server-current.pem")) != serving0, nil
	})
	// The renewal was the node's own CSR (selfnodeclient), not the token's.
	csrs, err = admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewed := false
	for _, c := range csrs.Items {
		renewed = renewed || (c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && c.Spec.Username == "system:node:joined" && len(c.Status.Certificate) > 0)
	}
	if !renewed {
		t.Fatal("no client certificate issued to system:node:joined (renewal)")
	}
	// Heartbeats go on with the new certificate: the lease is renewed after it.
	rotated := time.Now()
	Eventually(t, time.Minute, "node lease renewed after the rotation", func() (bool, error) {
		l, err := admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, "joined", metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(rotated.Add(time.Second)), err
	})
	// The API server reaches the agent over its renewed serving certificate.
	Eventually(t, time.Minute, "logs through the API server", func() (bool, error) {
		b, err := admin.CoreV1().Pods(ns).GetLogs("rotation", &v1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && strings.Contains(string(b), "still here"), err
	})

	// A restart needs no token: the node has its certificate.
	agent.Stop()
	startDaemon(t, nil, "podvisor agent is ready: node joined", "agent", "--server", join[3], "--node-name", "joined",
		"--data-dir", agentDir, "--runtime", "process", "--agent-port", fmt.Sprint(freePort(t)))
}
