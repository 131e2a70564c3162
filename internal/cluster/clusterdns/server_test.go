package clusterdns

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// A fragment that does not set up is refused and the last good
// configuration keeps answering (the hosts plugin stands in for the
// kubernetes plugin, which needs an API server).
func TestServerKeepsLastGoodConfiguration(t *testing.T) {
	port := freeUDPPort(t)
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("192.0.2.1 web.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n    hosts %s\n}\n", port, hosts)
	s := &Server{}
	t.Cleanup(s.Stop)
	if changed, err := s.Apply(good); err != nil || !changed {
		t.Fatalf("Apply(good) = %v, %v", changed, err)
	}
	ask := func() string {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion("web.example.", dns.TypeA)
		c := &dns.Client{Timeout: 2 * time.Second}
		r, _, err := c.Exchange(m, fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		if len(r.Answer) != 1 {
			t.Fatalf("answer = %v", r.Answer)
		}
		return r.Answer[0].(*dns.A).A.String()
	}
	if got := ask(); got != "192.0.2.1" {
		t.Fatalf("A = %s, want 192.0.2.1", got)
	}
	if changed, err := s.Apply(good); err != nil || changed {
		t.Errorf("Apply(same) = %v, %v; want no change", changed, err)
	}
	for name, bad := range map[string]string{
		"unknown plugin":   good[:len(good)-2] + "    no-such-plugin\n}\n",
		"unbalanced brace": good + "example.org {\n",
		"bad arguments":    good[:len(good)-2] + "    forward\n}\n",
	} {
		_, err := s.Apply(bad)
		if err == nil {
			t.Errorf("%s: Apply accepted it", name)
		} else if !strings.Contains(err.Error(), "still serving the previous configuration") {
			t.Errorf("%s: error %q does not say the old configuration serves", name, err)
		}
		if got := ask(); got != "192.0.2.1" {
			t.Errorf("%s: after the bad configuration A = %s, want 192.0.2.1", name, got)
		}
	}
}

// A node that starts with a bad user fragment has no last good
// configuration: it serves the one without the fragments and says so; once
// the fragment is fixed, the whole configuration serves.
func TestServerFallsBackWhenTheFirstConfigurationFails(t *testing.T) {
	port := freeUDPPort(t)
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("192.0.2.1 web.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf(".:%d {\n    bind 127.0.0.1\n    hosts %s\n}\n", port, hosts)
	bad := base[:len(base)-2] + "    no-such-plugin\n}\n"
	s := &Server{}
	t.Cleanup(s.Stop)
	changed, fellBack, err := s.ApplyOr(bad, base)
	if err == nil || !changed || !fellBack || !strings.Contains(err.Error(), "no-such-plugin") ||
		!strings.Contains(err.Error(), "serving without the customizations") {
		t.Fatalf("ApplyOr(bad, base) = %v, %v, %v; want the fragment's error, served without it", changed, fellBack, err)
	}
	m := new(dns.Msg)
	m.SetQuestion("web.example.", dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil || len(r.Answer) != 1 {
		t.Fatalf("the fallback does not answer: %v %v", r, err)
	}
	// Once something serves, a bad configuration keeps it, not the fallback.
	if _, fellBack, err := s.ApplyOr(bad+"# again\n", base); err == nil || fellBack {
		t.Errorf("second ApplyOr(bad) = fell back %v, %v; want an error and the running configuration kept", fellBack, err)
	}
	if changed, fellBack, err := s.ApplyOr(base+"# fixed\n", base); err != nil || !changed || fellBack {
		t.Errorf("ApplyOr(fixed) = %v, %v, %v", changed, fellBack, err)
	}
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}
