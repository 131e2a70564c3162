package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/cluster/pki"
)

// startDaemon runs podvisor with args until the test ends (SIGTERM), once
// its first stdout line is ready.
func startDaemon(t *testing.T, ready string, args ...string) *labDaemon {
	t.Helper()
	if args[0] == "agent" {
		// Agents on the test machine share its network namespace, where
		// only Service tests run a proxy (serviceProxyTest).
		args = append(args, "--disable-service-proxy")
	}
	if args[0] == "up" || args[0] == "agent" {
		// Daemons on the test machine share its address: their DNS would
		// fight over one port, and these tests resolve no names.
		args = append(args, "--disable-cluster-dns")
	}
	d, err := startLabDaemon(t, "podvisor "+args[0], exec.Command(binary, args...), ready, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	if args[0] == "agent" {
		requireAgentOnly(t, d.cmd.Process.Pid)
	}
	return d
}

// requireAgentOnly: the harness builds podvisor-agent beside podvisor, so a
// ready `podvisor agent` must have exec'd it (the agent without the control
// plane).
func requireAgentOnly(t *testing.T, pid int) {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(exe) != "podvisor-agent" {
		t.Fatalf("podvisor agent runs %s, want the agent-only podvisor-agent beside %s", exe, binary)
	}
}

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
	startDaemon(t, "podvisor server is ready: export KUBECONFIG="+filepath.Join(serverDir, "admin.kubeconfig"), "server", "--data-dir", serverDir, "--api-port", fmt.Sprint(api),
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
	agentPort := freePort(t)
	agentArgs := append(join[1:], "--node-name", "joined", "--data-dir", agentDir, "--runtime", "process", "--agent-port", fmt.Sprint(agentPort))
	agent := startDaemon(t, "podvisor agent is ready: node joined", agentArgs...)

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

	// Users other than the API server are authorized as by the kubelet's
	// webhook mode: RBAC on nodes/<subresource>.
	checkAgentAPIAuthorization(t, admin, serverDir, agentPort)

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
	again := startDaemon(t, "podvisor agent is ready: node joined", "agent", "--server", join[3], "--node-name", "joined",
		"--data-dir", agentDir, "--runtime", "process", "--agent-port", fmt.Sprint(freePort(t)))
	again.Stop()

	// --kubeconfig joins with credentials made elsewhere: here the node's
	// own kubeconfig, copied out of its data dir; the pod is still served.
	kubeconfig := filepath.Join(t.TempDir(), "elsewhere.kubeconfig")
	b, err := os.ReadFile(filepath.Join(agentDir, "node.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, "podvisor agent is ready: node joined", "agent", "--kubeconfig", kubeconfig, "--node-name", "joined",
		"--data-dir", agentDir, "--runtime", "process", "--agent-port", fmt.Sprint(freePort(t)))
	Eventually(t, time.Minute, "logs through the API server after the --kubeconfig join", func() (bool, error) {
		b, err := admin.CoreV1().Pods(ns).GetLogs("rotation", &v1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && strings.Contains(string(b), "still here"), err
	})
}

// checkAgentAPIAuthorization calls the agent API of node "joined" directly
// as two users with certificates of the cluster CA: one RBAC lets get
// nodes/proxy, one it does not.
func checkAgentAPIAuthorization(t *testing.T, admin kubernetes.Interface, serverDir string, agentPort int) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "node-proxy-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: []string{"get"}}}}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewer-node-proxy"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "viewer"}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(serverDir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	host := nodeInternalIP(t, admin, "joined")
	url := fmt.Sprintf("https://%s/pods", net.JoinHostPort(host, fmt.Sprint(agentPort)))
	for _, tt := range []struct {
		user     string
		wantCode int
		wantBody string
	}{
		{"viewer", http.StatusOK, `"kind":"PodList"`},
		{"stranger", http.StatusForbidden, "Forbidden (user=stranger, verb=get, resource=nodes, subresource=proxy)"},
	} {
		cert := issueClientCert(t, serverDir, tt.user)
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("%s: %v", tt.user, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.wantCode || !strings.Contains(string(body), tt.wantBody) {
			t.Errorf("%s: GET /pods: %d %.200q, want %d with %q", tt.user, resp.StatusCode, body, tt.wantCode, tt.wantBody)
		}
	}
}

// issueClientCert signs a client certificate for user with the server's CA key.
func issueClientCert(t *testing.T, serverDir, user string) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := pki.PKI{Dir: pki.Dir(serverDir)}.IssueClient(user, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
