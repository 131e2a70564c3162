package bootstrap

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func request(t *testing.T, cn string, orgs []string, ips []string, dns []string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestServingDecision(t *testing.T) {
	nodeA := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "10.99.0.11"}, {Type: v1.NodeHostName, Address: "host-a"}}}}
	nodes := map[string]*v1.Node{"a": nodeA, "bare": {ObjectMeta: metav1.ObjectMeta{Name: "bare"}}}
	getNode := func(name string) (*v1.Node, error) {
		if name == "broken" {
			return nil, errors.New("etcd down")
		}
		return nodes[name], nil
	}
	serving := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	good := request(t, "system:node:a", []string{"system:nodes"}, []string{"10.99.0.11"}, []string{"a", "host-a"})
	tests := []struct {
		name      string
		signer    string
		user      string
		groups    []string
		req       []byte
		usages    []certificatesv1.KeyUsage
		decided   bool
		want      Verdict
		wantInMsg string
	}{
		{name: "a node's own names and addresses", user: "system:node:a", req: good, want: Approve},
		{name: "with key encipherment (RSA keys)", user: "system:node:a", req: good, want: Approve,
			usages: []certificatesv1.KeyUsage{certificatesv1.UsageKeyEncipherment, certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}},
		{name: "another signer is not ours", signer: certificatesv1.KubeAPIServerClientKubeletSignerName, user: "system:node:a", req: good, want: Skip},
		{name: "already decided", user: "system:node:a", req: good, decided: true, want: Skip},
		{name: "node not registered yet", user: "system:node:c", req: request(t, "system:node:c", []string{"system:nodes"}, []string{"10.99.0.13"}, nil), want: Wait},
		{name: "node without addresses yet", user: "system:node:bare", req: request(t, "system:node:bare", []string{"system:nodes"}, []string{"10.99.0.14"}, nil), want: Wait},
		{name: "API error", user: "system:node:broken", req: request(t, "system:node:broken", []string{"system:nodes"}, []string{"10.1.1.1"}, nil), want: Wait},
		{name: "not a node", user: "alice", req: good, want: Deny, wantInMsg: "not by a node"},
		{name: "node user outside system:nodes", user: "system:node:a", groups: []string{"system:authenticated"}, req: good, want: Deny, wantInMsg: "not by a node"},
		{name: "another node's name in the subject", user: "system:node:b", req: good, want: Deny, wantInMsg: `may only ask for CN="system:node:b"`},
		{name: "wrong organization", user: "system:node:a", req: request(t, "system:node:a", []string{"system:masters"}, []string{"10.99.0.11"}, nil), want: Deny, wantInMsg: "O="},
		{name: "client auth usage", user: "system:node:a", req: good, want: Deny, wantInMsg: "client auth",
			usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth}},
		{name: "no server auth", user: "system:node:a", req: good, want: Deny, wantInMsg: "lack",
			usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}},
		{name: "an address that is not the node's", user: "system:node:a", req: request(t, "system:node:a", []string{"system:nodes"}, []string{"10.99.0.12"}, nil), want: Deny, wantInMsg: "10.99.0.12"},
		{name: "a name that is not the node's", user: "system:node:a", req: request(t, "system:node:a", []string{"system:nodes"}, nil, []string{"kubernetes.default"}), want: Deny, wantInMsg: "kubernetes.default"},
		{name: "no names at all", user: "system:node:a", req: request(t, "system:node:a", []string{"system:nodes"}, nil, nil), want: Deny, wantInMsg: "names no address"},
		{name: "garbage request", user: "system:node:a", req: []byte("nope"), want: Deny, wantInMsg: "not a PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csr := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
				SignerName: certificatesv1.KubeletServingSignerName, Username: tt.user, Groups: []string{"system:nodes", "system:authenticated"},
				Request: tt.req, Usages: serving,
			}}
			if tt.signer != "" {
				csr.Spec.SignerName = tt.signer
			}
			if tt.groups != nil {
				csr.Spec.Groups = tt.groups
			}
			if tt.usages != nil {
				csr.Spec.Usages = tt.usages
			}
			if tt.decided {
				csr.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: v1.ConditionTrue}}
			}
			d := ServingDecision(csr, getNode)
			if d.Verdict != tt.want || !strings.Contains(d.Message, tt.wantInMsg) {
				t.Errorf("got %v %q, want %v containing %q", d.Verdict, d.Message, tt.want, tt.wantInMsg)
			}
		})
	}
}
