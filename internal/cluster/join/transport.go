package join

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
)

// RotatingConfig is base (server and CA) authenticating with mgr's current
// client certificate at every handshake; when the certificate changes, open
// connections are closed so that none goes on with the old one (a
// long-running watch would otherwise keep a certificate past its expiry).
func RotatingConfig(ctx context.Context, base *rest.Config, mgr certificate.Manager) (*rest.Config, error) {
	tlsCfg, err := rest.TLSConfigFor(base)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		return nil, errors.New("the API server's address must be https")
	}
	tlsCfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c := mgr.Current(); c != nil {
			return c, nil
		}
		return &tls.Certificate{}, nil // no certificate: the server answers 401
	}
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	rc := rest.CopyConfig(base)
	rc.TLSClientConfig = rest.TLSClientConfig{}
	rc.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 25, DialContext: dialer.DialContext,
	})
	go func() {
		last := mgr.Current()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if cur := mgr.Current(); cur != last {
				last = cur
				dialer.CloseAll()
			}
		}
	}()
	return rc, nil
}
