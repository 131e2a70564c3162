package join

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cluster-bootstrap/token/jws"

	"github.com/podvisor/podvisor/internal/cluster/bootstrap"
)

// fakeCluster serves kube-public/cluster-info over TLS as an API server
// does: data is the ConfigMap's data (a nil map: 404).
func fakeCluster(t *testing.T, data func(server string, caPEM []byte) map[string]string) (*httptest.Server, []byte) {
	t.Helper()
	var caPEM []byte
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/kube-public/configmaps/cluster-info" {
			http.NotFound(w, r)
			return
		}
		d := data(srv.URL, caPEM)
		w.Header().Set("Content-Type", "application/json")
		if d == nil {
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Reason: metav1.StatusReasonNotFound, Code: 404})
			return
		}
		json.NewEncoder(w).Encode(v1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-info", Namespace: "kube-public"}, Data: d})
	})
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv, caPEM
}

func signed(t *testing.T, tok bootstrap.Token, kubeconfig string) string {
	t.Helper()
	sig, err := jws.ComputeDetachedSignature(kubeconfig, tok.ID, tok.Secret)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func TestDiscover(t *testing.T) {
	signatureWait = 200 * time.Millisecond
	tok := bootstrap.Token{ID: "abcdef", Secret: "0123456789abcdef"}
	wrong := bootstrap.Token{ID: "abcdef", Secret: "ffffffffffffffff"}
	other, err := SelfSigned("other-ca", nil, []string{"example.com"}) // not the server's
	if err != nil {
		t.Fatal(err)
	}
	otherCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Certificate[0]})
	hashOf := func(caPEM []byte) string {
		b, _ := pem.Decode(caPEM)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return bootstrap.CAHash(c)
	}
	clusterInfo := func(server string, ca []byte) string {
		kc, err := bootstrap.ClusterInfo(server, ca)
		if err != nil {
			t.Fatal(err)
		}
		return string(kc)
	}
	// good publishes cluster-info for the server's own CA, signed with tok.
	good := func(server string, ca []byte) map[string]string {
		kc := clusterInfo(server, ca)
		return map[string]string{"kubeconfig": kc, "jws-kubeconfig-abcdef": signed(t, tok, kc)}
	}
	for _, tt := range []struct {
		name    string
		data    func(server string, ca []byte) map[string]string
		tok     bootstrap.Token
		hashes  func(ca []byte) []string
		wantErr string
	}{
		{name: "signed, pinned", data: good, tok: tok, hashes: func(ca []byte) []string { return []string{hashOf(ca)} }},
		{name: "signed, one of several pins", data: good, tok: tok, hashes: func(ca []byte) []string { return []string{hashOf(otherCA), hashOf(ca)} }},
		{name: "signed, no pin", data: good, tok: tok},
		{name: "wrong secret", data: good, tok: wrong, wantErr: "does not verify with its secret"},
		{name: "unknown token", data: func(s string, ca []byte) map[string]string {
			return map[string]string{"kubeconfig": clusterInfo(s, ca)}
		}, tok: tok, wantErr: `carries no signature for token ID "abcdef"`},
		{name: "CA not pinned", data: good, tok: tok, hashes: func([]byte) []string { return []string{hashOf(otherCA)} }, wantErr: "matches no --ca-cert-hash"},
		{name: "no cluster-info", data: func(string, []byte) map[string]string { return nil }, tok: tok, wantErr: "publishes no kube-public/cluster-info"},
		{name: "cluster-info names a CA the server's certificate is not from", data: func(s string, _ []byte) map[string]string {
			kc := clusterInfo(s, otherCA)
			return map[string]string{"kubeconfig": kc, "jws-kubeconfig-abcdef": signed(t, tok, kc)}
		}, tok: tok, wantErr: "verified with cluster-info's CA"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, ca := fakeCluster(t, tt.data)
			var hashes []string
			if tt.hashes != nil {
				hashes = tt.hashes(ca)
			}
			cl, err := Discover(context.Background(), srv.URL, tt.tok, hashes)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), tt.tok.Secret) {
					t.Errorf("the error shows the token's secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cl.Server != srv.URL || string(cl.CAPEM) != string(ca) {
				t.Errorf("got %s, CA %d bytes; want %s and the server's CA", cl.Server, len(cl.CAPEM), srv.URL)
			}
		})
	}
}
