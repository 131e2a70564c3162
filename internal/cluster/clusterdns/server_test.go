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

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}
