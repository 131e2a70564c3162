package bootstrap

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
)

func TestParseToken(t *testing.T) {
	tok, err := ParseToken("abcdef.0123456789abcdef")
	if err != nil || tok.ID != "abcdef" || tok.Secret != "0123456789abcdef" || tok.String() != "abcdef.0123456789abcdef" {
		t.Fatalf("ParseToken = %+v, %v", tok, err)
	}
	for _, bad := range []string{"", "abcdef", "ABCDEF.0123456789abcdef", "abcdef.0123456789abcde", "abcdefg.0123456789abcdef"} {
		_, err := ParseToken(bad)
		if err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
			continue
		}
		// The secret never appears in messages.
		if strings.Contains(err.Error(), "0123456789abcde") {
			t.Errorf("ParseToken(%q) error shows the secret: %v", bad, err)
		}
	}
}

func TestNewTokenSecret(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s := TokenSecret(tok, exp, "for node a")
	if s.Name != "bootstrap-token-"+tok.ID || s.Namespace != "kube-system" || s.Type != bootstrapapi.SecretTypeBootstrapToken {
		t.Fatalf("secret %s/%s type %s", s.Namespace, s.Name, s.Type)
	}
	for k, want := range map[string]string{
		"token-id": tok.ID, "token-secret": tok.Secret, "expiration": "2030-01-02T03:04:05Z",
		"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
		"auth-extra-groups": NodeTokenGroup, "description": "for node a",
	} {
		if got := string(s.Data[k]); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if _, ok := TokenSecret(tok, time.Time{}, "").Data["expiration"]; ok {
		t.Error("a token without TTL has an expiration")
	}
}

func TestCAHash(t *testing.T) {
	// kubeadm's pin is sha256 over the DER SubjectPublicKeyInfo.
	c := &x509.Certificate{RawSubjectPublicKeyInfo: []byte("abc")}
	if got, want := CAHash(c), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Fatalf("CAHash = %s, want %s", got, want)
	}
	if h, err := ParseCAHash("SHA256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"); err != nil || h != CAHash(c) {
		t.Fatalf("ParseCAHash upper case = %q, %v", h, err)
	}
	for _, bad := range []string{"ba7816bf", "sha256:xyz", "md5:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"} {
		if _, err := ParseCAHash(bad); err == nil {
			t.Errorf("ParseCAHash(%q) accepted", bad)
		}
	}
}
