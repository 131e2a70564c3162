// Package bootstrap is the server side of joining nodes, as kubeadm sets a
// cluster up for the kubelet's TLS bootstrap: bootstrap tokens (Secrets in
// kube-system), the public cluster-info ConfigMap in kube-public that the
// controller manager's bootstrap signer signs with each token, the RBAC
// bindings that let a token holder ask for a node client certificate (and a
// node renew its own), and an approver for node serving certificates.
//
// References: https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/
// and https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/.
package bootstrap

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// NodeTokenGroup is the extra group podvisor's node tokens authenticate
// with (kubeadm's is system:bootstrappers:kubeadm:default-node-token).
const NodeTokenGroup = "system:bootstrappers:podvisor:default-node-token"

// Token is a bootstrap token, ID.SECRET (6 and 16 characters of [a-z0-9]).
type Token struct {
	ID, Secret string
}

func (t Token) String() string { return bootstraputil.TokenFromIDAndSecret(t.ID, t.Secret) }

// ParseToken reads a bootstrap token; the error says what a valid one looks like.
func ParseToken(s string) (Token, error) {
	if !bootstraputil.IsValidBootstrapToken(s) {
		return Token{}, fmt.Errorf("token %q is not a bootstrap token: want ID.SECRET, 6 and 16 characters of [a-z0-9] (as 'podvisor token create' prints)", redact(s))
	}
	id, secret, _ := strings.Cut(s, ".")
	return Token{ID: id, Secret: secret}, nil
}

// redact keeps a token's ID and hides its secret in messages.
func redact(s string) string {
	if id, _, ok := strings.Cut(s, "."); ok {
		return id + ".<redacted>"
	}
	if len(s) > 6 {
		return s[:6] + "…"
	}
	return s
}

// NewToken makes a random token.
func NewToken() (Token, error) {
	s, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return Token{}, err
	}
	return ParseToken(s)
}

// TokenSecret is the kube-system Secret that makes t valid until expires
// (zero: forever) for authentication (joining) and signing (cluster-info).
func TokenSecret(t Token, expires time.Time, description string) *v1.Secret {
	data := map[string][]byte{
		bootstrapapi.BootstrapTokenIDKey:               []byte(t.ID),
		bootstrapapi.BootstrapTokenSecretKey:           []byte(t.Secret),
		bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"),
		bootstrapapi.BootstrapTokenUsageSigningKey:     []byte("true"),
		bootstrapapi.BootstrapTokenExtraGroupsKey:      []byte(NodeTokenGroup),
	}
	if !expires.IsZero() {
		data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(expires.UTC().Format(time.RFC3339))
	}
	if description != "" {
		data[bootstrapapi.BootstrapTokenDescriptionKey] = []byte(description)
	}
	return &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(t.ID), Namespace: metav1.NamespaceSystem},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		Data:       data,
	}
}

// CreateToken stores a new token valid for ttl (0: forever).
func CreateToken(ctx context.Context, c kubernetes.Interface, ttl time.Duration, description string) (Token, time.Time, error) {
	t, err := NewToken()
	if err != nil {
		return Token{}, time.Time{}, err
	}
	var expires time.Time
	if ttl > 0 {
		expires = time.Now().Add(ttl)
	}
	if _, err := c.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, TokenSecret(t, expires, description), metav1.CreateOptions{}); err != nil {
		return Token{}, time.Time{}, fmt.Errorf("creating the token's secret: %w", err)
	}
	return t, expires, nil
}

// CAHash is the pin of a CA certificate as kubeadm writes it
// (--discovery-token-ca-cert-hash): sha256 over its SubjectPublicKeyInfo.
func CAHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ParseCAHash checks a pin's form: sha256: and 64 hex digits.
func ParseCAHash(s string) (string, error) {
	h, ok := strings.CutPrefix(strings.ToLower(s), "sha256:")
	if !ok || len(h) != 64 {
		return "", fmt.Errorf("CA hash %q: want sha256: followed by 64 hex digits (as 'podvisor token create --print-join-command' prints)", s)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("CA hash %q: %v", s, err)
	}
	return "sha256:" + h, nil
}

// ParseCerts reads every certificate of a PEM bundle.
func ParseCerts(pemData []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := pemData; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate in PEM data")
	}
	return certs, nil
}
