package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// Leaf certificates (the API server's serving and client certificates, the
// components' and the node's) live a year and are renewed at start once
// within RenewBefore of expiry, as k3s's; the CA (ten years) is never
// re-issued, so nodes and kubeconfigs keep trusting the cluster.
const (
	LeafValidity = 365 * 24 * time.Hour
	RenewBefore  = 120 * 24 * time.Hour
)

// leafStems are the leaf certificates Ensure issues (pki/<stem>.crt).
var leafStems = []string{"apiserver", "apiserver-kubelet-client", "admin", "controller-manager", "scheduler", "kube-proxy",
	MetricsServer, MetricsServerServing, FrontProxyClient, "node", "agent-serving"}

// NeedsRenewal reports whether a leaf certificate is due to be re-issued at
// now: within RenewBefore of its expiry, expired, or not yet valid (a clock
// set back, or a certificate from elsewhere).
func NeedsRenewal(c *x509.Certificate, now time.Time) bool {
	return !now.Before(c.NotAfter.Add(-RenewBefore)) || now.Before(c.NotBefore)
}

// RotateCertificates re-issues every leaf certificate of dataDir's PKI with
// a new key and a year's validity, keeping each one's subject, names and
// usages; the CA is untouched. podvisor must be stopped: the next start uses
// the new certificates (and rewrites the kubeconfigs that inline them).
// It returns the files re-issued.
func RotateCertificates(dataDir string) ([]string, error) {
	if addr := runningAPI(dataDir); addr != "" {
		return nil, fmt.Errorf("podvisor is running with data dir %s (its API answers at %s): stop it first", dataDir, addr)
	}
	p := PKI{Dir: Dir(dataDir)}
	ca, signer, err := loadPair(p.Path(CACert), p.Path(CAKey))
	if err != nil {
		return nil, fmt.Errorf("certificate authority in %s: %w", p.Dir, err)
	}
	// Read them all first: a damaged file stops the rotation before any
	// certificate changed.
	olds := map[string]*x509.Certificate{}
	for _, stem := range leafStems {
		c, err := loadCert(p.Path(stem + ".crt"))
		if errors.Is(err, os.ErrNotExist) {
			continue // podvisor server has no node certificates
		}
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", p.Path(stem+".crt"), err)
		}
		olds[stem] = c
	}
	if len(olds) == 0 {
		return nil, fmt.Errorf("no certificates in %s: has podvisor started with this data dir?", p.Dir)
	}
	var done []string
	for _, stem := range leafStems {
		old, ok := olds[stem]
		if !ok {
			continue
		}
		issuer, issuerKey := ca, signer
		if stem == FrontProxyClient { // the aggregation layer's CA signs it
			if issuer, issuerKey, err = loadPair(p.Path(FrontProxyCACert), p.Path(FrontProxyCAKey)); err != nil {
				return done, fmt.Errorf("front-proxy certificate authority in %s: %w", p.Dir, err)
			}
		}
		tmpl := &x509.Certificate{Subject: old.Subject, ExtKeyUsage: old.ExtKeyUsage,
			DNSNames: old.DNSNames, IPAddresses: old.IPAddresses}
		if err := p.issueLeaf(issuer, issuerKey, tmpl, stem); err != nil {
			return done, fmt.Errorf("certificate %s: %w", p.Path(stem+".crt"), err)
		}
		done = append(done, p.Path(stem+".crt"))
	}
	return done, nil
}

// runningAPI returns the address of dataDir's API server if something
// accepts connections there, else "".
func runningAPI(dataDir string) string {
	rc, err := clientcmd.BuildConfigFromFlags("", AdminKubeconfig(dataDir))
	if err != nil {
		return ""
	}
	u, err := parseHostPort(rc.Host)
	if err != nil {
		return ""
	}
	conn, err := net.DialTimeout("tcp", u, time.Second)
	if err != nil {
		return ""
	}
	conn.Close()
	return u
}

func parseHostPort(server string) (string, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}
