package agentup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/cluster/bootstrap"
	"github.com/podvisor/podvisor/internal/cluster/join"
)

// credentials are how a joined agent talks to the API server and serves its
// own API.
type credentials struct {
	rest       *rest.Config
	kubeconfig string // the same credentials in a file
	pkiDir     string // holds ca.crt, the CA the agent API trusts
	serving    func() *tls.Certificate
	server     string
}

// joinWithToken gives the node its credentials from a bootstrap token
// (first start) or from what an earlier start obtained: token discovery of
// the CA, a client certificate through a CSR, and certificate managers that
// renew the client certificate and get and renew the serving one.
func joinWithToken(ctx context.Context, o AgentOptions, dir string, ips []net.IP, stderr io.Writer) (credentials, error) {
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return credentials{}, err
	}
	caFile := filepath.Join(pki, "ca.crt")
	if !join.HasClientCertificate(pki) {
		if o.Token == "" {
			return credentials{}, errors.New("agent: --server needs --token to join (this data dir holds no node certificate yet)")
		}
		tok, err := bootstrap.ParseToken(o.Token)
		if err != nil {
			return credentials{}, fmt.Errorf("--token: %w", err)
		}
		var hashes []string
		for _, h := range o.CAHashes {
			p, err := bootstrap.ParseCAHash(h)
			if err != nil {
				return credentials{}, fmt.Errorf("--ca-cert-hash: %w", err)
			}
			hashes = append(hashes, p)
		}
		if len(hashes) == 0 {
			fmt.Fprintf(stderr, "podvisor: warning: no --ca-cert-hash: trusting %s's CA because its cluster-info is signed with the token\n", o.Server)
		}
		cl, err := join.Discover(ctx, o.Server, tok, hashes)
		if err != nil {
			return credentials{}, err
		}
		if err := os.WriteFile(caFile, cl.CAPEM, 0o644); err != nil {
			return credentials{}, err
		}
		boot := &rest.Config{Host: o.Server, BearerToken: tok.String(), TLSClientConfig: rest.TLSClientConfig{CAData: cl.CAPEM}}
		if err := join.RequestClientCertificate(ctx, boot, o.NodeName, pki); err != nil {
			return credentials{}, err
		}
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return credentials{}, fmt.Errorf("%s: %w (remove the data dir's pki folder to join again)", caFile, err)
	}
	kubeconfig := filepath.Join(dir, "node.kubeconfig")
	if err := join.WriteKubeconfig(kubeconfig, pki, o.Server, caPEM); err != nil {
		return credentials{}, err
	}
	var client kubernetes.Interface
	clientMgr, err := join.ClientManager(ctx, o.NodeName, pki, func() kubernetes.Interface { return client })
	if err != nil {
		return credentials{}, err
	}
	rc, err := join.RotatingConfig(ctx, &rest.Config{Host: o.Server, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}, clientMgr)
	if err != nil {
		return credentials{}, err
	}
	if client, err = kubernetes.NewForConfig(rc); err != nil {
		return credentials{}, err
	}
	clientMgr.Start()
	go func() { <-ctx.Done(); clientMgr.Stop() }()
	serving, err := startServing(ctx, o.NodeName, ips, pki, client)
	if err != nil {
		return credentials{}, err
	}
	return credentials{rest: rc, kubeconfig: kubeconfig, pkiDir: pki, serving: serving, server: o.Server}, nil
}

// joinWithKubeconfig uses credentials made elsewhere; the serving
// certificate still comes from a CSR.
func joinWithKubeconfig(ctx context.Context, o AgentOptions, dir string, ips []net.IP) (credentials, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return credentials{}, fmt.Errorf("--kubeconfig: %w", err)
	}
	caPEM := rc.CAData
	if len(caPEM) == 0 && rc.CAFile != "" {
		if caPEM, err = os.ReadFile(rc.CAFile); err != nil {
			return credentials{}, fmt.Errorf("--kubeconfig: %w", err)
		}
	}
	if len(caPEM) == 0 {
		return credentials{}, fmt.Errorf("--kubeconfig %s names no certificate authority: the agent API trusts the cluster's CA, which it must know", o.Kubeconfig)
	}
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return credentials{}, err
	}
	if err := os.WriteFile(filepath.Join(pki, "ca.crt"), caPEM, 0o644); err != nil {
		return credentials{}, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return credentials{}, err
	}
	serving, err := startServing(ctx, o.NodeName, ips, pki, client)
	if err != nil {
		return credentials{}, err
	}
	return credentials{rest: rc, kubeconfig: o.Kubeconfig, pkiDir: pki, serving: serving, server: rc.Host}, nil
}

// startServing runs the serving certificate's manager: the certificate
// names the node's addresses and host name, as its Node reports them.
func startServing(ctx context.Context, nodeName string, ips []net.IP, pki string, client kubernetes.Interface) (func() *tls.Certificate, error) {
	names := []string{nodeName}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	mgr, err := join.ServingManager(ctx, nodeName, ips, names, pki, client)
	if err != nil {
		return nil, err
	}
	mgr.Start()
	go func() { <-ctx.Done(); mgr.Stop() }()
	// Until the CSR is approved, a self-signed certificate, as a kubelet
	// without serverTLSBootstrap serves: an API server that verifies node
	// certificates (podvisor server does) refuses it, one that does not
	// (kubeadm's default) can use the node at once.
	selfSigned, err := join.SelfSigned(nodeName, ips, names)
	if err != nil {
		return nil, err
	}
	return func() *tls.Certificate {
		if c := mgr.Current(); c != nil {
			return c
		}
		return selfSigned
	}, nil
}
