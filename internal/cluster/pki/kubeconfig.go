package pki

import (
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes a kubeconfig for the identity whose certificate is
// pki/<stem>.crt, with the certificate data inlined so the file stands alone.
func (p PKI) WriteKubeconfig(path, server, stem string) error {
	ca, err := os.ReadFile(p.Path(CACert))
	if err != nil {
		return err
	}
	crt, err := os.ReadFile(p.Path(stem + ".crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(p.Path(stem + ".key"))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["podvisor"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[stem] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	cfg.Contexts["podvisor"] = &clientcmdapi.Context{Cluster: "podvisor", AuthInfo: stem}
	cfg.CurrentContext = "podvisor"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFile(path, data, 0o600)
}
