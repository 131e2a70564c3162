// Package join is the node side of joining a cluster, as the kubelet and
// kubeadm do it: token discovery of the cluster's CA (kube-public
// cluster-info, signed with the token, pinned by the CA's hash), TLS
// bootstrap of the node's client certificate through a CSR, rotation of it
// before it expires, and the node's serving certificate through a
// kubernetes.io/kubelet-serving CSR.
//
// References: https://kubernetes.io/docs/reference/access-authn-authz/kubelet-tls-bootstrapping/
// and kubeadm's token discovery,
// https://kubernetes.io/docs/reference/setup-tools/kubeadm/kubeadm-join/#token-based-discovery-with-ca-pinning.
package join

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"

	"github.com/podvisor/podvisor/internal/cluster/bootstrap"
)

// Cluster is what discovery learns: the API server's address as the cluster
// publishes it, and the CA bundle (PEM) that its certificates chain to.
type Cluster struct {
	Server string
	CAPEM  []byte
}

// signatureWait bounds how long discovery waits for the controller manager's
// bootstrap signer to sign cluster-info with a token created moments ago.
var signatureWait = 5 * time.Second

// Discover reads cluster-info from server without trusting it, checks that
// it is signed with tok (so the server knows the token), that its CA matches
// one of caHashes (when given), and reads it again over a connection
// verified with that CA. Every refusal says why in one line.
func Discover(ctx context.Context, server string, tok bootstrap.Token, caHashes []string) (Cluster, error) {
	insecure, err := anonymousClient(server, nil)
	if err != nil {
		return Cluster{}, err
	}
	var kubeconfig, sig string
	deadline := time.Now().Add(signatureWait)
	for {
		cm, err := insecure.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return Cluster{}, fmt.Errorf("%s publishes no kube-public/cluster-info: it is not a podvisor server or a kubeadm-style cluster that takes bootstrap tokens", server)
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			return Cluster{}, fmt.Errorf("%s does not let anonymous clients read kube-public/cluster-info: %v", server, err)
		case err != nil:
			return Cluster{}, fmt.Errorf("reading cluster-info from %s: %w", server, err)
		}
		kubeconfig = cm.Data[bootstrapapi.KubeConfigKey]
		if kubeconfig == "" {
			return Cluster{}, fmt.Errorf("%s: kube-public/cluster-info has no %q key", server, bootstrapapi.KubeConfigKey)
		}
		var ok bool
		if sig, ok = cm.Data[bootstrapapi.JWSSignatureKeyPrefix+tok.ID]; ok {
			break
		}
		if time.Now().After(deadline) {
			return Cluster{}, fmt.Errorf("token %s.<redacted> is not valid on %s: cluster-info carries no signature for token ID %q (the token is unknown, expired or deleted; 'podvisor token create' on the server makes a new one)", tok.ID, server, tok.ID)
		}
		select {
		case <-ctx.Done():
			return Cluster{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if !jws.DetachedTokenIsValid(sig, kubeconfig, tok.ID, tok.Secret) {
		return Cluster{}, fmt.Errorf("token %s.<redacted> is wrong: %s's cluster-info signature for token ID %q does not verify with its secret", tok.ID, server, tok.ID)
	}
	cl, err := parseClusterInfo(kubeconfig)
	if err != nil {
		return Cluster{}, fmt.Errorf("%s: cluster-info: %w", server, err)
	}
	certs, err := bootstrap.ParseCerts(cl.CAPEM)
	if err != nil {
		return Cluster{}, fmt.Errorf("%s: cluster-info's CA: %w", server, err)
	}
	if len(caHashes) > 0 {
		var got []string
		for _, c := range certs {
			got = append(got, bootstrap.CAHash(c))
		}
		if !slices.ContainsFunc(got, func(h string) bool { return slices.Contains(caHashes, h) }) {
			return Cluster{}, fmt.Errorf("refusing %s: its CA has hash %s, which matches no --ca-cert-hash given (%v)", server, got[0], caHashes)
		}
	}
	// The signature proves the server knows the token; now prove it holds
	// the CA's certificate, and that it publishes the same thing when asked
	// over a verified connection.
	verified, err := anonymousClient(server, cl.CAPEM)
	if err != nil {
		return Cluster{}, err
	}
	cm, err := verified.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		return Cluster{}, fmt.Errorf("%s over TLS verified with cluster-info's CA: %w", server, err)
	}
	if cm.Data[bootstrapapi.KubeConfigKey] != kubeconfig {
		return Cluster{}, fmt.Errorf("%s: cluster-info changed between the unverified and the verified read", server)
	}
	return cl, nil
}

func parseClusterInfo(kubeconfig string) (Cluster, error) {
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		return Cluster{}, err
	}
	if len(cfg.Clusters) != 1 {
		return Cluster{}, fmt.Errorf("want one cluster in its kubeconfig, found %d", len(cfg.Clusters))
	}
	for _, c := range cfg.Clusters {
		if len(c.CertificateAuthorityData) == 0 {
			return Cluster{}, errors.New("its kubeconfig has no certificate-authority-data")
		}
		return Cluster{Server: c.Server, CAPEM: c.CertificateAuthorityData}, nil
	}
	panic("unreachable")
}

// anonymousClient talks to server with no credentials; with caPEM nil it
// does not verify the server (discovery's first read, checked afterwards).
func anonymousClient(server string, caPEM []byte) (kubernetes.Interface, error) {
	rc := &rest.Config{Host: server, Timeout: 10 * time.Second}
	if caPEM == nil {
		rc.Insecure = true
	} else {
		rc.CAData = caPEM
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("--server %s: %w", server, err)
	}
	return c, nil
}
