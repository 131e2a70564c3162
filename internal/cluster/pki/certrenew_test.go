package pki

import (
	"crypto/x509"
	"net"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestNeedsRenewal(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name      string
		notBefore time.Time
		notAfter  time.Time
		want      bool
	}{
		{"fresh, a year left", now.Add(-day), now.Add(365 * day), false},
		{"121 days left: kept", now.Add(-200 * day), now.Add(121 * day), false},
		{"exactly 120 days left: renewed (k3s's rule)", now.Add(-200 * day), now.Add(120 * day), true},
		{"30 days left: renewed", now.Add(-300 * day), now.Add(30 * day), true},
		{"expired: renewed", now.Add(-400 * day), now.Add(-day), true},
		{"ten-year certificate of an old podvisor: kept", now.Add(-day), now.Add(3650 * day), false},
		{"not yet valid (clock set back): renewed", now.Add(day), now.Add(365 * day), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &x509.Certificate{NotBefore: tc.notBefore, NotAfter: tc.notAfter}
			if got := NeedsRenewal(c, now); got != tc.want {
				t.Errorf("NeedsRenewal(notAfter %v, now %v) = %v, want %v", tc.notAfter, now, got, tc.want)
			}
		})
	}
}

// Ensure at start: leaves re-issued once within 120 days of expiry, the CA
// never.
func TestEnsureRenewsExpiringLeavesOnly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	p := PKI{Dir: t.TempDir(), Clock: clk}
	ensure := func() (ca, api *x509.Certificate) {
		t.Helper()
		if err := p.Ensure("n1", []net.IP{net.ParseIP("192.0.2.1")}, nil); err != nil {
			t.Fatal(err)
		}
		ca, err := loadCert(p.Path(CACert))
		if err != nil {
			t.Fatal(err)
		}
		api, err = loadCert(p.Path(APIServerCert))
		if err != nil {
			t.Fatal(err)
		}
		return ca, api
	}
	ca0, api0 := ensure()
	if want := t0.Add(LeafValidity); !api0.NotAfter.Equal(want) {
		t.Fatalf("apiserver certificate valid until %v, want %v (a year)", api0.NotAfter, want)
	}
	clk.SetTime(t0.Add(200 * 24 * time.Hour)) // 165 days left
	ca1, api1 := ensure()
	if api1.SerialNumber.Cmp(api0.SerialNumber) != 0 {
		t.Errorf("certificate with 165 days left was re-issued")
	}
	clk.SetTime(t0.Add(250 * 24 * time.Hour)) // 115 days left
	ca2, api2 := ensure()
	if api2.SerialNumber.Cmp(api0.SerialNumber) == 0 {
		t.Fatalf("certificate with 115 days left was not re-issued")
	}
	if want := clk.Now().Add(LeafValidity); !api2.NotAfter.Equal(want) {
		t.Errorf("renewed certificate valid until %v, want %v", api2.NotAfter, want)
	}
	if !slicesEqualIPs(api2.IPAddresses, api0.IPAddresses) || api2.Subject.CommonName != api0.Subject.CommonName {
		t.Errorf("renewed certificate names %v %q, want %v %q", api2.IPAddresses, api2.Subject.CommonName, api0.IPAddresses, api0.Subject.CommonName)
	}
	for _, ca := range []*x509.Certificate{ca1, ca2} {
		if ca.SerialNumber.Cmp(ca0.SerialNumber) != 0 {
			t.Errorf("CA re-issued")
		}
	}
}

// RotateCertificates re-issues every leaf, keeping names, not the CA.
func TestRotateCertificates(t *testing.T) {
	dir := t.TempDir()
	p := PKI{Dir: Dir(dir)}
	if err := p.Ensure("n1", nil, []string{"api.example"}); err != nil {
		t.Fatal(err)
	}
	before := map[string]*x509.Certificate{}
	for _, stem := range append([]string{"ca", "front-proxy-ca"}, leafStems...) {
		c, err := loadCert(p.Path(stem + ".crt"))
		if err != nil {
			t.Fatal(err)
		}
		before[stem] = c
	}
	files, err := RotateCertificates(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(leafStems) {
		t.Errorf("re-issued %d files, want %d (the leaves, the front-proxy client among them): %v", len(files), len(leafStems), files)
	}
	fpCA, err := loadCert(p.Path(FrontProxyCACert))
	if err != nil {
		t.Fatal(err)
	}
	fp, err := loadCert(p.Path(FrontProxyClient + ".crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fp.CheckSignatureFrom(fpCA); err != nil {
		t.Errorf("rotated front-proxy client not signed by the front-proxy CA: %v", err)
	}
	if fp.Subject.CommonName != FrontProxyClient {
		t.Errorf("rotated front-proxy client is %q, want %q", fp.Subject.CommonName, FrontProxyClient)
	}
	for stem, old := range before {
		c, err := loadCert(p.Path(stem + ".crt"))
		if err != nil {
			t.Fatal(err)
		}
		same := c.SerialNumber.Cmp(old.SerialNumber) == 0
		isCA := stem == "ca" || stem == "front-proxy-ca"
		if isCA && !same {
			t.Errorf("%s re-issued", stem)
		}
		if !isCA && (same || c.Subject.String() != old.Subject.String() || len(c.DNSNames) != len(old.DNSNames)) {
			t.Errorf("%s: serial kept %v, subject %q (was %q), names %v (were %v)", stem, same, c.Subject, old.Subject, c.DNSNames, old.DNSNames)
		}
		// Aggregated API servers trust the front-proxy client only
		// through the front-proxy CA.
		issuer := "ca"
		if stem == FrontProxyClient {
			issuer = "front-proxy-ca"
		}
		if !isCA {
			if err := c.CheckSignatureFrom(before[issuer]); err != nil {
				t.Errorf("%s not signed by %s: %v", stem, issuer, err)
			}
		}
	}
}

func slicesEqualIPs(a, b []net.IP) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// The aggregation layer's front-proxy client is signed by a CA of its own,
// not the cluster CA (which also signs CSRs), and kept across starts.
func TestEnsureFrontProxy(t *testing.T) {
	p := PKI{Dir: t.TempDir()}
	if err := p.Ensure("n1", nil, nil); err != nil {
		t.Fatal(err)
	}
	load := func(name string) *x509.Certificate {
		t.Helper()
		c, err := loadCert(p.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, fpCA, fp := load(CACert), load(FrontProxyCACert), load(FrontProxyClient+".crt")
	if fp.Subject.CommonName != FrontProxyClient || len(fp.ExtKeyUsage) != 1 || fp.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("front-proxy client is %q with usages %v, want %q, client auth", fp.Subject.CommonName, fp.ExtKeyUsage, FrontProxyClient)
	}
	if err := fp.CheckSignatureFrom(fpCA); err != nil {
		t.Errorf("front-proxy client not signed by the front-proxy CA: %v", err)
	}
	if fp.CheckSignatureFrom(ca) == nil || fpCA.Equal(ca) {
		t.Errorf("the front-proxy CA is the cluster CA")
	}
	if err := p.Ensure("n1", nil, nil); err != nil {
		t.Fatal(err)
	}
	if again := load(FrontProxyCACert); !again.Equal(fpCA) {
		t.Errorf("the front-proxy CA was re-made at the second start")
	}
}
