package pki

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"k8s.io/client-go/tools/clientcmd"
)

// JoinLocal writes what an extra node agent on this machine needs to join the
// control plane of serverDataDir (a running `podvisor up`): into pkiDir, the
// cluster CA, a node client certificate (CN system:node:<node>, O
// system:nodes) and a serving certificate signed by the server's CA; and at
// kubeconfig, the node's kubeconfig pointing at the server's API. Files that
// exist are kept. It is a local, testing join: it reads the CA's private key.
func JoinLocal(serverDataDir, pkiDir, kubeconfig, nodeName string, hostIPs []net.IP) error {
	src := PKI{Dir: Dir(serverDataDir)}
	ca, signer, err := loadPair(src.Path(CACert), src.Path(CAKey))
	if err != nil {
		return fmt.Errorf("server CA in %s: %w", src.Dir, err)
	}
	server, err := serverOf(AdminKubeconfig(serverDataDir))
	if err != nil {
		return err
	}
	dst := PKI{Dir: pkiDir}
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(src.Path(CACert))
	if err != nil {
		return err
	}
	if err := writeFile(dst.Path(CACert), caPEM, 0o644); err != nil {
		return err
	}
	ips := append([]net.IP{net.ParseIP("127.0.0.1")}, hostIPs...)
	for _, s := range []certSpec{
		{name: "node", cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{name: "agent-serving", cn: nodeName, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, ips: ips, dns: []string{"localhost", nodeName}},
	} {
		if err := dst.ensureLeaf(ca, signer, s); err != nil {
			return fmt.Errorf("certificate %s: %w", s.name, err)
		}
	}
	return dst.WriteKubeconfig(kubeconfig, server, "node")
}

// serverOf reads the API server address from a kubeconfig.
func serverOf(kubeconfig string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("server kubeconfig: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return "", fmt.Errorf("server kubeconfig %s has no current context", kubeconfig)
	}
	cluster, ok := cfg.Clusters[ctx.Cluster]
	if !ok || cluster.Server == "" {
		return "", fmt.Errorf("server kubeconfig %s names no server", kubeconfig)
	}
	return cluster.Server, nil
}
