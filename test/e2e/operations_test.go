package e2e

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/cli/version"
)

// The API server and kubectl tell the Kubernetes version podvisor embeds
// (Helm's kubeVersion constraints and conformance specs read it).
func TestAPIServerVersion(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	parts := strings.Split(strings.TrimPrefix(version.Kubernetes, "v"), ".")
	major, minor := parts[0], parts[1]
	check := func(what, gitVersion, gotMajor, gotMinor string) {
		t.Helper()
		if !strings.HasPrefix(gitVersion, version.Kubernetes+"+") && gitVersion != version.Kubernetes {
			t.Errorf("%s gitVersion %q, want %s (build metadata allowed)", what, gitVersion, version.Kubernetes)
		}
		if gotMajor != major || gotMinor != minor {
			t.Errorf("%s major/minor %q/%q, want %s/%s", what, gotMajor, gotMinor, major, minor)
		}
	}
	sv, err := p.Admin.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	check("Discovery().ServerVersion()", sv.GitVersion, sv.Major, sv.Minor)

	out, stderr, code := runPodvisor(t, 30*time.Second, "kubectl", "--kubeconfig",
		filepath.Join(p.DataDir, "admin.kubeconfig"), "version", "-o", "json")
	if code != 0 {
		t.Fatalf("kubectl version: exit %d: %s", code, stderr)
	}
	var v struct {
		ClientVersion, ServerVersion struct{ Major, Minor, GitVersion string }
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("kubectl version -o json: %v\n%s", err, out)
	}
	check("kubectl's serverVersion", v.ServerVersion.GitVersion, v.ServerVersion.Major, v.ServerVersion.Minor)
	check("kubectl's clientVersion", v.ClientVersion.GitVersion, v.ClientVersion.Major, v.ClientVersion.Minor)
	if strings.Contains(stderr, "WARNING") {
		t.Errorf("kubectl version warns: %s", stderr)
	}
}

// A podvisor started with --config-file alone takes every flag from it: the
// data dir, node name and ports the test checks could only come from there.
func TestConfigFileFlags(t *testing.T) {
	processRuntimeOnly(t)
	t.Parallel()
	p := NewPodvisor(t)
	p.ConfigFileOnly = true
	p.Start()
	if _, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{}); err != nil {
		t.Fatalf("node %s (the file's node-name) on the file's api-port %d: %v", p.NodeName, p.APIPort, err)
	}

	// Bad files: refused before anything starts, with the file, line and key.
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"unknown key", "data-dir: " + dir + "\napi-prot: 7443\n", []string{"config.yaml:2", `"api-prot"`}},
		{"bad value", "data-dir: " + dir + "\napi-port: seven\n", []string{"config.yaml:2", `"api-port"`, "seven"}},
		{"not YAML", "data-dir: [\n", []string{"config.yaml"}},
	} {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := runPodvisor(t, time.Minute, "up", "--config-file", path)
		if code == 0 {
			t.Errorf("%s: podvisor up accepted %q", tc.name, tc.file)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q does not say %q", tc.name, stderr, w)
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused config file's data dir was written: %v", entries)
	}

	// $PODVISOR_CONFIG_FILE names the file when --config-file does not.
	viaEnv := filepath.Join(t.TempDir(), "env.yaml")
	if err := os.WriteFile(viaEnv, []byte("data-dir: "+dir+"\nnode-nmae: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "up")
	cmd.Env = append(os.Environ(), "PODVISOR_CONFIG_FILE="+viaEnv)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), viaEnv+":2") || !strings.Contains(string(out), `"node-nmae"`) {
		t.Errorf("podvisor up with PODVISOR_CONFIG_FILE=%s: %v\n%s; want an error naming the file's line 2 and the key", viaEnv, err, out)
	}
}

// Secrets are stored encrypted in etcd, and rotate-keys replaces the key
// without losing one.
func TestSecretsEncryptionAtRest(t *testing.T) {
	processRuntimeOnly(t)
	t.Parallel()
	p := NewPodvisor(t, "--secrets-encryption")
	p.Start()
	ctx := context.Background()
	const plaintext = "plaintext-marker-5c2e91"
	if _, err := p.Admin.CoreV1().Secrets("default").Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "topsecret"},
		StringData: map[string]string{"password": plaintext},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{fmt.Sprintf("127.0.0.1:%d", p.etcdPorts[0])}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	stored := func() (key string) {
		t.Helper()
		resp, err := etcd.Get(ctx, "/registry/secrets/default/topsecret")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("etcd get: %v (%d values)", err, len(resp.Kvs))
		}
		v := resp.Kvs[0].Value
		const prefix = "k8s:enc:secretbox:v1:"
		if !bytes.HasPrefix(v, []byte(prefix)) || bytes.Contains(v, []byte(plaintext)) {
			t.Fatalf("stored Secret starts %q and contains the plaintext: %v; want %s… and no plaintext", v[:min(len(v), 40)], bytes.Contains(v, []byte(plaintext)), prefix)
		}
		name, _, _ := strings.Cut(string(v[len(prefix):]), ":")
		return name
	}
	key1 := stored()
	keyFile := filepath.Join(p.DataDir, "encryption-config.yaml")
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v, mode %v; want 0600", keyFile, err, st.Mode().Perm())
	}
	out, stderr, code := runPodvisor(t, 30*time.Second, "secrets-encrypt", "status", "--data-dir", p.DataDir)
	if code != 0 || !strings.Contains(out, "Encryption Status: Enabled") || !strings.Contains(out, "Active key: "+key1) ||
		!strings.Contains(out, "Applied by the API server: yes") {
		t.Fatalf("secrets-encrypt status: exit %d\n%s%s", code, out, stderr)
	}

	out, stderr, code = runPodvisor(t, 5*time.Minute, "secrets-encrypt", "rotate-keys", "--data-dir", p.DataDir)
	if code != 0 {
		t.Fatalf("rotate-keys: exit %d\n%s%s", code, out, stderr)
	}
	t.Logf("rotate-keys:\n%s", out)
	if key2 := stored(); key2 == key1 {
		t.Errorf("after rotate-keys the Secret is still stored with key %s", key1)
	}
	s, err := p.Admin.CoreV1().Secrets("default").Get(ctx, "topsecret", metav1.GetOptions{})
	if err != nil || string(s.Data["password"]) != plaintext {
		t.Fatalf("Secret after rotation: %v, %q", err, s.Data["password"])
	}
	if b, _ := os.ReadFile(keyFile); strings.Contains(string(b), key1) {
		t.Errorf("old key %s still in %s after rotation", key1, keyFile)
	}

	// A damaged key file, or a well-formed one with another key, stops the
	// next start, named, and is left as it was.
	p.Stop()
	good, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	_, oldSecret, _ := strings.Cut(string(good), "secret: ")
	oldSecret, _, _ = strings.Cut(oldSecret, "\n")
	otherKey := make([]byte, 32)
	if _, err := rand.Read(otherKey); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{
		bytes.Replace(good, []byte("secret: "), []byte("secret: AAAA"), 1),
		bytes.Replace(good, []byte(oldSecret), []byte(base64.StdEncoding.EncodeToString(otherKey)), 1),
	} {
		if err := os.WriteFile(keyFile, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code = runPodvisor(t, 2*time.Minute, p.UpArgs()...)
		if code == 0 || !strings.Contains(stderr, keyFile) {
			t.Errorf("start with key file\n%s\nexit %d, stderr %q; want an error naming %s", bad, code, stderr, keyFile)
		}
		t.Logf("refused: %s", strings.TrimSpace(stderr))
		if after, _ := os.ReadFile(keyFile); !bytes.Equal(after, bad) {
			t.Errorf("the refused key file was changed")
		}
	}
	if err := os.WriteFile(keyFile, good, 0o600); err != nil {
		t.Fatal(err)
	}
	p.Start()
	if s, err := p.Admin.CoreV1().Secrets("default").Get(ctx, "topsecret", metav1.GetOptions{}); err != nil || string(s.Data["password"]) != plaintext {
		t.Fatalf("Secret after restart: %v", err)
	}
}

// Leaf certificates near expiry are re-issued at start; certificate rotate
// re-issues them all with podvisor stopped; the CA stays; the cluster keeps
// working after each.
func TestCertificatesRenewAndRotate(t *testing.T) {
	processRuntimeOnly(t)
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	pki := filepath.Join(p.DataDir, "pki")
	caBefore, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runPodvisor(t, 30*time.Second, "certificate", "rotate", "--data-dir", p.DataDir); code == 0 || !strings.Contains(stderr, "stop it first") {
		t.Errorf("certificate rotate while running: exit %d, %q; want a refusal", code, stderr)
	}
	p.Stop()

	// An API server certificate 30 days from expiry (k3s's rule renews
	// within 120).
	shortLived := reissue(t, pki, "apiserver", 30*24*time.Hour)
	p.Start()
	renewed := readCert(t, filepath.Join(pki, "apiserver.crt"))
	if renewed.SerialNumber.Cmp(shortLived.SerialNumber) == 0 || time.Until(renewed.NotAfter) < 300*24*time.Hour {
		t.Fatalf("apiserver.crt after start: serial kept %v, valid until %v; want a new one valid a year",
			renewed.SerialNumber.Cmp(shortLived.SerialNumber) == 0, renewed.NotAfter)
	}
	checkServes(t, p, renewed)

	p.Stop()
	admin := readCert(t, filepath.Join(pki, "admin.crt"))
	out, stderr, code := runPodvisor(t, 30*time.Second, "certificate", "rotate", "--data-dir", p.DataDir)
	if code != 0 {
		t.Fatalf("certificate rotate: exit %d\n%s%s", code, out, stderr)
	}
	rotated := readCert(t, filepath.Join(pki, "apiserver.crt"))
	if rotated.SerialNumber.Cmp(renewed.SerialNumber) == 0 || readCert(t, filepath.Join(pki, "admin.crt")).SerialNumber.Cmp(admin.SerialNumber) == 0 {
		t.Fatalf("certificate rotate kept the API server's or admin's certificate:\n%s", out)
	}
	if caAfter, _ := os.ReadFile(filepath.Join(pki, "ca.crt")); !bytes.Equal(caAfter, caBefore) {
		t.Errorf("the CA changed")
	}
	p.Start()
	checkServes(t, p, rotated)
}

// checkServes checks that the API server presents cert and that kubectl
// works with the admin kubeconfig.
func checkServes(t *testing.T, p *Podvisor, cert *x509.Certificate) {
	t.Helper()
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.APIPort), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	served := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if served.SerialNumber.Cmp(cert.SerialNumber) != 0 {
		t.Errorf("API server serves serial %v, want the file's %v", served.SerialNumber, cert.SerialNumber)
	}
	out, stderr, code := runPodvisor(t, 30*time.Second, "kubectl", "--kubeconfig", filepath.Join(p.DataDir, "admin.kubeconfig"), "get", "nodes")
	if code != 0 || !strings.Contains(out, p.NodeName) {
		t.Errorf("kubectl get nodes: exit %d\n%s%s", code, out, stderr)
	}
}

// readPEM returns the DER bytes of a PEM file's first block.
func readPEM(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	return block.Bytes
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	c, err := x509.ParseCertificate(readPEM(t, path))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readKey(t *testing.T, path string) crypto.Signer {
	t.Helper()
	k, err := x509.ParsePKCS8PrivateKey(readPEM(t, path))
	if err != nil {
		t.Fatal(err)
	}
	return k.(crypto.Signer)
}

// reissue rewrites pki/<stem>.crt, same key and names, expiring in left.
func reissue(t *testing.T, pki, stem string, left time.Duration) *x509.Certificate {
	t.Helper()
	ca, caKey := readCert(t, filepath.Join(pki, "ca.crt")), readKey(t, filepath.Join(pki, "ca.key"))
	old, key := readCert(t, filepath.Join(pki, stem+".crt")), readKey(t, filepath.Join(pki, stem+".key"))
	tmpl := *old
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(left)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pki, stem+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}
