// Package pki makes and keeps the cluster's keys, certificates and
// kubeconfigs in a data directory's pki/: the CA, the control plane's and
// the node's leaf certificates, their renewal and rotation, and the
// credentials of an agent joining a server on the same machine. It links no
// control plane, so a node agent can use it.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/cluster/ranges"
)

// PKI is the set of keys and certificates podvisor generates once into DIR/pki.
// Every file is created only when missing, so a restart keeps the same CA.
type PKI struct {
	Dir string
	// Clock decides leaf certificates' validity and renewal; nil: the
	// real clock.
	Clock clock.PassiveClock
}

func (p PKI) now() time.Time {
	if p.Clock == nil {
		return time.Now()
	}
	return p.Clock.Now()
}

// File names inside the PKI directory.
const (
	CACert            = "ca.crt"
	CAKey             = "ca.key"
	APIServerCert     = "apiserver.crt"
	APIServerKey      = "apiserver.key"
	ServiceAccountKey = "service-account.key"
	ServiceAccountPub = "service-account.pub"
	KubeletClientCert = "apiserver-kubelet-client.crt"
	KubeletClientKey  = "apiserver-kubelet-client.key"
	// The aggregation layer's own CA, as kubeadm's: aggregated API servers
	// (metrics-server) trust requests carrying X-Remote-User only from a
	// client certificate of this CA, so no certificate the cluster CA signs
	// for a node or a user can impersonate anyone through them.
	FrontProxyCACert = "front-proxy-ca.crt"
	FrontProxyCAKey  = "front-proxy-ca.key"
	FrontProxyClient = "front-proxy-client"
	// MetricsServer and MetricsServerServing are the embedded
	// metrics-server's client identity (system:metrics-server, for the API
	// and the nodes' agent APIs) and its serving certificate.
	MetricsServer        = "metrics-server"
	MetricsServerServing = "metrics-server-serving"
)

// MetricsServerServiceDNS is the name the aggregator checks the embedded
// metrics-server's serving certificate against (its Service's).
const MetricsServerServiceDNS = "metrics-server.kube-system.svc"

// Dir is the PKI directory of a data directory.
func Dir(dataDir string) string { return filepath.Join(dataDir, "pki") }

// AdminKubeconfig is a data directory's kubeconfig with a system:masters
// certificate.
func AdminKubeconfig(dataDir string) string { return filepath.Join(dataDir, "admin.kubeconfig") }

// Path returns the absolute path of a file in the PKI directory.
func (p PKI) Path(name string) string { return filepath.Join(p.Dir, name) }

// certSpec describes one leaf certificate.
type certSpec struct {
	name   string // file stem
	cn     string
	orgs   []string
	usages []x509.ExtKeyUsage
	dns    []string
	ips    []net.IP
}

func (p PKI) ensureCA() (*x509.Certificate, crypto.Signer, error) {
	return p.ensureCAFiles(CACert, CAKey, "podvisor-ca")
}

// ensureCAFiles loads the CA in crtName and keyName, or makes one named cn.
func (p PKI) ensureCAFiles(crtName, keyName, cn string) (*x509.Certificate, crypto.Signer, error) {
	if exists(p.Path(crtName)) && exists(p.Path(keyName)) {
		return loadPair(p.Path(crtName), p.Path(keyName))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := p.now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	if err := writePair(p.Path(crtName), p.Path(keyName), der, key); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// ensureLeaf creates the certificate named by spec unless one exists that
// names everything spec asks for and is not due for renewal.
func (p PKI) ensureLeaf(ca *x509.Certificate, caSigner crypto.Signer, s certSpec) error {
	crt, key := p.Path(s.name+".crt"), p.Path(s.name+".key")
	if c, err := loadCert(crt); err == nil && exists(key) && coversNames(c, s) {
		if !NeedsRenewal(c, p.now()) {
			return nil
		}
		slog.Info("renewing certificate", "file", crt, "notAfter", c.NotAfter)
	}
	return p.issueLeaf(ca, caSigner, &x509.Certificate{
		Subject:     pkix.Name{CommonName: s.cn, Organization: s.orgs},
		ExtKeyUsage: s.usages,
		DNSNames:    s.dns,
		IPAddresses: s.ips,
	}, s.name)
}

// issueLeaf signs a fresh key for tmpl's subject, names and usages, valid
// for LeafValidity from now, and writes it as pki/<stem>.crt and .key.
func (p PKI) issueLeaf(ca *x509.Certificate, caSigner crypto.Signer, tmpl *x509.Certificate, stem string) error {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := p.now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(LeafValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, k.Public(), caSigner)
	if err != nil {
		return err
	}
	return writePair(p.Path(stem+".crt"), p.Path(stem+".key"), der, k)
}

// coversNames reports whether the certificate names every address and DNS
// name spec asks for (a server given a new --tls-san or address gets a new
// serving certificate; other certificates are kept).
func coversNames(c *x509.Certificate, s certSpec) bool {
	for _, ip := range s.ips {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	for _, n := range s.dns {
		if !slices.Contains(c.DNSNames, n) {
			return false
		}
	}
	return true
}

// loadCert reads the first certificate of a PEM file.
func loadCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return x509.ParseCertificate(block.Bytes)
}

// Ensure creates every key and certificate the control plane and the agent need.
// hostIPs and hostNames are added to the serving certificates.
func (p PKI) Ensure(nodeName string, hostIPs []net.IP, hostNames []string) error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	ca, signer, err := p.ensureCA()
	if err != nil {
		return fmt.Errorf("certificate authority: %w", err)
	}
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	ips := append([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(ranges.ServiceIP)}, hostIPs...)
	specs := []certSpec{
		{name: "apiserver", cn: "kube-apiserver", usages: server, ips: ips,
			dns: append([]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, hostNames...)},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, usages: client},
		{name: "admin", cn: "admin", orgs: []string{"system:masters"}, usages: client},
		{name: "controller-manager", cn: "system:kube-controller-manager", usages: client},
		{name: "scheduler", cn: "system:kube-scheduler", usages: client},
		// The service proxy's own identity: the API server's default
		// system:node-proxier binding names this user.
		{name: "kube-proxy", cn: "system:kube-proxy", usages: client},
		// The embedded metrics-server: bound to its roles by name
		// (internal/cluster/metricsserver), served under its Service's name.
		{name: MetricsServer, cn: "system:metrics-server", usages: client},
		{name: MetricsServerServing, cn: "metrics-server", usages: server, ips: ips,
			dns: []string{MetricsServerServiceDNS, "metrics-server.kube-system", "localhost"}},
	}
	if nodeName != "" { // podvisor server runs no node agent
		specs = append(specs,
			certSpec{name: "node", cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}, usages: client},
			certSpec{name: "agent-serving", cn: nodeName, usages: server, ips: ips, dns: []string{"localhost", nodeName}})
	}
	for _, s := range specs {
		if err := p.ensureLeaf(ca, signer, s); err != nil {
			return fmt.Errorf("certificate %s: %w", s.name, err)
		}
	}
	fpCA, fpSigner, err := p.ensureCAFiles(FrontProxyCACert, FrontProxyCAKey, "podvisor-front-proxy-ca")
	if err != nil {
		return fmt.Errorf("front-proxy certificate authority: %w", err)
	}
	if err := p.ensureLeaf(fpCA, fpSigner, certSpec{name: FrontProxyClient, cn: FrontProxyClient, usages: client}); err != nil {
		return fmt.Errorf("certificate %s: %w", FrontProxyClient, err)
	}
	return p.ensureServiceAccountKey()
}

// IssueClient signs a fresh client certificate (not stored); tests use it for
// identities with no rights.
func (p PKI) IssueClient(cn string, orgs []string) (certPEM, keyPEM []byte, err error) {
	ca, signer, err := loadPair(p.Path(CACert), p.Path(CAKey))
	if err != nil {
		return nil, nil, err
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, k.Public(), signer)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), nil
}

// The service-account signing key is RSA: every token consumer accepts it.
func (p PKI) ensureServiceAccountKey() error {
	if exists(p.Path(ServiceAccountKey)) && exists(p.Path(ServiceAccountPub)) {
		return nil
	}
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return err
	}
	if err := writeFile(p.Path(ServiceAccountKey), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600); err != nil {
		return err
	}
	return writeFile(p.Path(ServiceAccountPub), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func writePair(crtPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		return err
	}
	return writeFile(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeFile writes atomically so an interrupted first start never leaves half a key.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func loadPair(crtPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	cb, err := os.ReadFile(crtPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, nil, errors.New("malformed PEM in " + crtPath)
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kblock.Bytes)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("CA key is not a signer")
	}
	return cert, signer, nil
}
