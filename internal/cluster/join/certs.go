package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
)

// Files of a joined node, in its PKI directory.
const (
	clientPair      = "kubelet-client" // kubelet-client-current.pem: certificate and key
	servingPair     = "kubelet-server"
	approvalTimeout = 2 * time.Minute
)

// nodeSubject is the identity the Node authorizer and NodeRestriction know.
func nodeSubject(node string) pkix.Name {
	return pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}
}

// ClientStore is the node's client certificate store in dir.
func ClientStore(dir string) (certificate.FileStore, error) {
	return certificate.NewFileStore(clientPair, dir, dir, "", "")
}

// HasClientCertificate reports whether dir holds an unexpired node client
// certificate (an agent that joined before restarts without its token).
func HasClientCertificate(dir string) bool {
	store, err := ClientStore(dir)
	if err != nil {
		return false
	}
	c, err := store.Current()
	return err == nil && c.Leaf != nil && time.Now().Before(c.Leaf.NotAfter)
}

// RequestClientCertificate asks for the node's client certificate with the
// bootstrap credentials in bootstrapCfg (a CSR for signer
// kubernetes.io/kube-apiserver-client-kubelet, which the controller
// manager approves for token holders), waits for it and stores it in dir.
func RequestClientCertificate(ctx context.Context, bootstrapCfg *rest.Config, node, dir string) error {
	c, err := kubernetes.NewForConfig(bootstrapCfg)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: nodeSubject(node)}, key)
	if err != nil {
		return err
	}
	reqPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	name, uid, err := csr.RequestCertificateWithContext(ctx, c, reqPEM, "", certificatesv1.KubeAPIServerClientKubeletSignerName, nil,
		[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}, key)
	if err != nil {
		return fmt.Errorf("requesting node %s's client certificate from %s: %w", node, bootstrapCfg.Host, explainAuth(err))
	}
	wctx, cancel := context.WithTimeout(ctx, approvalTimeout)
	defer cancel()
	certPEM, err := csr.WaitForCertificate(wctx, c, name, uid)
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("certificate signing request %s for node %s was not approved within %v: the controller manager approves node client certificates of token holders (podvisor server binds group system:bootstrappers for it); an administrator can run 'kubectl certificate approve %s'", name, node, approvalTimeout, name)
		}
		return fmt.Errorf("certificate signing request %s for node %s: %w", name, node, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	store, err := ClientStore(dir)
	if err != nil {
		return err
	}
	_, err = store.Update(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return err
}

// explainAuth turns the API server's bare 401 for a bootstrap token into
// what it means.
func explainAuth(err error) error {
	var status interface{ Status() metav1.Status }
	if errors.As(err, &status) && status.Status().Code == 401 {
		return fmt.Errorf("the server refused the token (401 Unauthorized: unknown, wrong or expired): %w", err)
	}
	return err
}

// WriteKubeconfig writes at path the node's kubeconfig: the server, the CA
// and the rotating client certificate file in pkiDir (for tools and users;
// the agent itself follows rotation through its certificate manager).
func WriteKubeconfig(path, pkiDir, server string, caPEM []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	current := filepath.Join(pkiDir, clientPair+"-current.pem")
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificate: current, ClientKey: current}
	cfg.Contexts["node"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "node"}
	cfg.CurrentContext = "node"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ClientManager rotates the node's client certificate in dir before it
// expires (a CSR the controller manager approves for a node's own name).
// client must authenticate with the manager's current certificate
// (RotatingConfig); it is used only once the manager runs.
func ClientManager(ctx context.Context, node, dir string, client func() kubernetes.Interface) (certificate.Manager, error) {
	store, err := ClientStore(dir)
	if err != nil {
		return nil, err
	}
	return certificate.NewManager(&certificate.Config{
		ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return client(), nil },
		Template:         &x509.CertificateRequest{Subject: nodeSubject(node)},
		SignerName:       certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:           []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		CertificateStore: store,
		Name:             "node client",
		Ctx:              &ctx,
	})
}

// ServingManager gets and rotates the node's serving certificate for its
// IPs and names through kubernetes.io/kubelet-serving CSRs (approved by
// podvisor server, or by an administrator).
func ServingManager(ctx context.Context, node string, ips []net.IP, names []string, dir string, client kubernetes.Interface) (certificate.Manager, error) {
	store, err := certificate.NewFileStore(servingPair, dir, dir, "", "")
	if err != nil {
		return nil, err
	}
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	return certificate.NewManager(&certificate.Config{
		ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		Template:         &x509.CertificateRequest{Subject: nodeSubject(node), IPAddresses: ips, DNSNames: names},
		SignerName:       certificatesv1.KubeletServingSignerName,
		Usages:           []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		CertificateStore: store,
		Name:             "node serving",
		Ctx:              &ctx,
	})
}

// SelfSigned is a serving certificate signed by its own key (valid a year,
// not stored), for the time before the node's CSR is approved.
func SelfSigned(node string, ips []net.IP, names []string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: node + "@" + strconv.FormatInt(now.Unix(), 10)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips, DNSNames: names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
