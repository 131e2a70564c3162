package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func nodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// TestUpRegistersReadyNode covers the foundation: node Ready with real
// capacity, the lease renewed, objects stored, RBAC and NodeRestriction real.
func TestUpRegistersReadyNode(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ctx := context.Background()

	n, err := p.Admin.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !nodeReady(n) {
		t.Fatalf("node not Ready: %+v", n.Status.Conditions)
	}
	for _, ct := range []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		found := false
		for _, c := range n.Status.Conditions {
			found = found || c.Type == ct
		}
		if !found {
			t.Errorf("node has no %s condition", ct)
		}
	}
	if pods := n.Status.Capacity[v1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("capacity pods = %s, want 110", pods.String())
	}
	if cpu := n.Status.Capacity[v1.ResourceCPU]; cpu.Value() < 1 {
		t.Errorf("capacity cpu = %s", cpu.String())
	}
	if mem := n.Status.Allocatable[v1.ResourceMemory]; mem.Value() <= 0 {
		t.Errorf("allocatable memory = %s", mem.String())
	}
	if int(n.Status.DaemonEndpoints.KubeletEndpoint.Port) != p.Agent {
		t.Errorf("kubelet endpoint port = %d, want %d", n.Status.DaemonEndpoints.KubeletEndpoint.Port, p.Agent)
	}
	if !strings.Contains(n.Status.NodeInfo.KubeletVersion, "podvisor") || n.Status.NodeInfo.KernelVersion == "" {
		t.Errorf("nodeInfo = %+v", n.Status.NodeInfo)
	}
	hasHostname := false
	for _, a := range n.Status.Addresses {
		hasHostname = hasHostname || a.Type == v1.NodeHostName
	}
	if !hasHostname {
		t.Errorf("addresses = %v, want a Hostname", n.Status.Addresses)
	}

	// The lease is renewed: renewTime advances (every 10 s by default).
	lease, err := p.Admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := lease.Spec.RenewTime.Time
	Eventually(t, 30*time.Second, "lease renewal", func() (bool, error) {
		l, err := p.Admin.CoordinationV1().Leases("kube-node-lease").Get(ctx, p.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return l.Spec.RenewTime.Time.After(first), nil
	})

	// Objects can be created and read back.
	ns := p.Namespace("foundation")
	_, err = p.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := p.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
	if err != nil || cm.Data["k"] != "v" {
		t.Fatalf("configmap read back: %v %v", cm, err)
	}

	// RBAC is real: a valid certificate with no rights gets 403.
	nobody := clientWithCert(t, p, "nobody", nil)
	_, err = nobody.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("client with no rights: err = %v, want 403 Forbidden", err)
	}

	// NodeRestriction: the node's credentials cannot modify another node.
	_, err = p.Admin.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other-node"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeCfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(p.DataDir, "kubeconfigs", "node.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	nodeClient := kubernetes.NewForConfigOrDie(nodeCfg)
	_, err = nodeClient.CoreV1().Nodes().Patch(ctx, "other-node", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"hijacked":"yes"}}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node credentials patching another node: err = %v, want Forbidden", err)
	}
	// ...but it can modify its own.
	_, err = nodeClient.CoreV1().Nodes().Patch(ctx, p.NodeName, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"mine":"yes"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Errorf("node credentials patching its own node: %v", err)
	}

	p.Stop()
	if code := p.ExitCode(); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0; stderr:\n%s", code, p.Stderr())
	}
	if s := p.Stderr(); strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
		t.Errorf("stderr has a stack trace:\n%s", s)
	}
}

// TestRestartKeepsState: a second start on the same data dir keeps the CA,
// the objects and the node.
func TestRestartKeepsState(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ctx := context.Background()
	ns := p.Namespace("restart")
	if _, err := p.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "keep"}, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca1, err := os.ReadFile(filepath.Join(p.DataDir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	p.Stop()
	if code := p.ExitCode(); code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, p.Stderr())
	}

	p.Start()
	ca2, _ := os.ReadFile(filepath.Join(p.DataDir, "pki", "ca.crt"))
	if string(ca1) != string(ca2) {
		t.Error("CA changed across restart")
	}
	cm, err := p.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "keep", metav1.GetOptions{})
	if err != nil || cm.Data["a"] != "b" {
		t.Fatalf("configmap after restart: %v, %v", cm, err)
	}
	Eventually(t, 30*time.Second, "node Ready after restart", func() (bool, error) {
		n, err := p.Admin.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{})
		return err == nil && nodeReady(n), err
	})
}

// expectOneLineFailure checks the bad-input contract: exit 1, one line on
// stderr naming the problem, nothing on stdout, no stack trace.
func expectOneLineFailure(t *testing.T, want string, args ...string) {
	t.Helper()
	stdout, stderr, code := runPodvisor(t, 60*time.Second, args...)
	if code != 1 {
		t.Errorf("exit code = %d, want 1 (stderr %q)", code, stderr)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 {
		t.Errorf("stderr has %d lines, want 1:\n%s", len(lines), stderr)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr = %q, want it to mention %q", stderr, want)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	baseArgs := func(dir string, api, agent int) []string {
		return []string{"up", "--data-dir", dir, "--api-port", itoa(api), "--agent-port", itoa(agent), "--runtime", "process", "--disable-metrics-server"}
	}
	t.Run("api port in use", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		expectOneLineFailure(t, "port "+itoa(port)+" (--api-port) is already in use",
			baseArgs(t.TempDir(), port, freePort(t))...)
	})
	t.Run("agent port in use", func(t *testing.T) {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		expectOneLineFailure(t, "(--agent-port) is already in use", baseArgs(t.TempDir(), freePort(t), port)...)
	})
	t.Run("unwritable data dir", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "a-file")
		if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		expectOneLineFailure(t, "data dir", baseArgs(filepath.Join(file, "sub"), freePort(t), freePort(t))...)
	})
	t.Run("read-only data dir", func(t *testing.T) {
		// Root ignores permission bits, so use a read-only bind... a file in
		// place of the directory is the portable way to make it unwritable.
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			t.Skip("root can write a 0500 directory; covered by the test above")
		}
		expectOneLineFailure(t, "not writable", baseArgs(dir, freePort(t), freePort(t))...)
	})
	t.Run("malformed config", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "kubelet.yaml")
		if err := os.WriteFile(cfg, []byte("kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\nmaxPods: [not a number\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		expectOneLineFailure(t, "config "+cfg, append(baseArgs(t.TempDir(), freePort(t), freePort(t)), "--config", cfg)...)
	})
	t.Run("wrong kind in config", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "kubelet.yaml")
		if err := os.WriteFile(cfg, []byte("kind: Pod\napiVersion: v1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		expectOneLineFailure(t, "want kind KubeletConfiguration", append(baseArgs(t.TempDir(), freePort(t), freePort(t)), "--config", cfg)...)
	})
	t.Run("incompatible data dir", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "podvisor.json"), []byte(`{"layout": 99}`), 0o600); err != nil {
			t.Fatal(err)
		}
		expectOneLineFailure(t, "incompatible", baseArgs(dir, freePort(t), freePort(t))...)
	})
}

// TestConfigWarnsOnce: unimplemented KubeletConfiguration fields are named in
// one warning line, and the implemented ones take effect.
func TestConfigWarnsOnce(t *testing.T) {
	processRuntimeOnly(t)
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte("kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\nmaxPods: 42\nregistryPullQPS: 3\nstaticPodPath: /etc/kubernetes/manifests\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := NewPodvisor(t, "--config", cfg)
	p.Start()
	n, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pods := n.Status.Capacity[v1.ResourcePods]; pods.Value() != 42 {
		t.Errorf("capacity pods = %s, want 42 from maxPods", pods.String())
	}
	warn := p.Stderr()
	if strings.Count(warn, "\n") != 1 || !strings.Contains(warn, "registryPullQPS, staticPodPath") {
		t.Errorf("stderr = %q, want one warning line naming registryPullQPS, staticPodPath", warn)
	}
}

func itoa(i int) string { return big.NewInt(int64(i)).String() }

// clientWithCert signs a client certificate with podvisor's CA for an
// arbitrary identity and returns a client using it.
func clientWithCert(t *testing.T, p *Podvisor, cn string, orgs []string) *kubernetes.Clientset {
	t.Helper()
	pki := filepath.Join(p.DataDir, "pki")
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	caKeyPEM, err := os.ReadFile(filepath.Join(pki, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(caKeyPEM)
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:   pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalPKCS8PrivateKey(key)
	cfg := &rest.Config{Host: p.AdminCfg.Host, TLSClientConfig: rest.TLSClientConfig{
		CAData:   caPEM,
		CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyData:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}),
	}}
	return kubernetes.NewForConfigOrDie(cfg)
}
