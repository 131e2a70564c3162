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
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/podvisor/podvisor/internal/cluster/pki"
)

// agentAPI is an HTTPS client of a podvisor's agent API that trusts the
// cluster CA and presents no certificate, and the API's base URL (the
// node's address, which the serving certificate names).
func agentAPI(t *testing.T, p *Podvisor) (*http.Client, string) {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(p.DataDir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	host := nodeInternalIP(t, p.Admin, p.NodeName)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
		fmt.Sprintf("https://%s", net.JoinHostPort(host, fmt.Sprint(p.Agent)))
}

// agentAPIAs is agentAPI presenting a client certificate of the cluster
// CA for user cn in system:masters.
func agentAPIAs(t *testing.T, p *Podvisor, cn string) (*http.Client, string) {
	t.Helper()
	client, base := agentAPI(t, p)
	certPEM, keyPEM, err := pki.PKI{Dir: pki.Dir(p.DataDir)}.IssueClient(cn, []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	client.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	return client, base
}

// nodeInternalIP is the node's address as the API server reaches it (and
// its serving certificate names).
func nodeInternalIP(t *testing.T, admin kubernetes.Interface, name string) string {
	t.Helper()
	n, err := admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP: %+v", name, n.Status.Addresses)
	return ""
}

// getBearer GETs url with token as its bearer token ("" sends none).
func getBearer(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// serviceAccountToken makes service account ns/name and a token for it.
func serviceAccountToken(t *testing.T, p *Podvisor, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := p.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := p.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// A service account bound to system:kubelet-api-admin scrapes the agent API
// with its token, as an in-cluster Prometheus or metrics-server does; one
// without the binding gets the kubelet's Forbidden, a garbage token, an
// expired one and no credentials the kubelet's 401.
func TestAgentAPIServiceAccountTokens(t *testing.T) {
	p := Shared(t)
	ctx := context.Background()
	ns := p.Namespace("agentapi-tokens")
	scraper := serviceAccountToken(t, p, ns, "scraper")
	stranger := serviceAccountToken(t, p, ns, "stranger")
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-agentapi-scraper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}}}
	if _, err := p.Admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Admin.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}) })
	c, base := agentAPI(t, p)

	// RBAC applies a new binding within moments; a denial is cached 30 s.
	Eventually(t, 2*time.Minute, "the bound service account reads /pods", func() (bool, error) {
		code, body := getBearer(t, c, base+"/pods", scraper)
		if code != http.StatusOK {
			return false, fmt.Errorf("%d %.200q", code, body)
		}
		return strings.Contains(body, `"kind":"PodList"`), fmt.Errorf("body %.300q", body)
	})
	if code, body := getBearer(t, c, base+"/stats/summary", scraper); code != http.StatusOK || !strings.Contains(body, `"nodeName":"`+p.NodeName+`"`) {
		t.Errorf("bound service account: GET /stats/summary: %d %.300q", code, body)
	}
	want := fmt.Sprintf("Forbidden (user=system:serviceaccount:%s:stranger, verb=get, resource=nodes, subresource=stats)", ns)
	if code, body := getBearer(t, c, base+"/stats/summary", stranger); code != http.StatusForbidden || strings.TrimSpace(body) != want {
		t.Errorf("unbound service account: %d %q, want 403 %q", code, body, want)
	}
	// An expired token: the bound one's claims, signed again with the
	// cluster's service-account key, once with an expiry an hour ago and
	// once with one an hour ahead (accepted: the refusal is the expiry's).
	if code, body := getBearer(t, c, base+"/stats/summary", resignedToken(t, p, scraper, time.Now().Add(time.Hour))); code != http.StatusOK {
		t.Errorf("re-signed unexpired token: %d %.300q, want 200", code, body)
	}
	expired := resignedToken(t, p, scraper, time.Now().Add(-time.Hour))
	for name, token := range map[string]string{"garbage token": "not-a-token", "no credentials": "", "expired token": expired} {
		if code, body := getBearer(t, c, base+"/stats/summary", token); code != http.StatusUnauthorized || strings.TrimSpace(body) != "Unauthorized" {
			t.Errorf("%s: %d %q, want 401 Unauthorized", name, code, body)
		}
	}
}

// resignedToken is token's claims with expiry exp (issued and valid from an
// hour before it), signed with the cluster's service-account key under the
// same key ID, as the API server would have issued it.
func resignedToken(t *testing.T, p *Podvisor, token string, exp time.Time) string {
	t.Helper()
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]any{}
	if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil {
		t.Fatal(err)
	}
	claims["exp"], claims["iat"], claims["nbf"] = exp.Unix(), exp.Add(-time.Hour).Unix(), exp.Add(-time.Hour).Unix()
	keyPEM, err := os.ReadFile(filepath.Join(pki.Dir(p.DataDir), "service-account.key"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		t.Fatal("service-account.key: no PEM block")
	}
	key, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", parsed.Headers[0].KeyID)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
