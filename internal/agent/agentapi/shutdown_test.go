package agentapi

import (
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
)

// /shutdown (behind `podvisor node shutdown|cancel`) is served only when the
// agent passes a handler, and only to authorized clients.
func TestShutdownRoute(t *testing.T) {
	var got []string
	ts := startServer(t, func(c *Config) {
		c.Shutdown = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = append(got, r.Method)
			w.Write([]byte(`{"shuttingDown":true}`))
		})
	})
	admin := ts.ca.issue("admin", []string{"system:masters"}, x509.ExtKeyUsageClientAuth)
	c := ts.client(&admin)
	resp, err := c.Post(ts.url+"/shutdown", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(got) != 1 || got[0] != http.MethodPost {
		t.Fatalf("POST /shutdown as admin: %s, handler saw %v", resp.Status, got)
	}
	node := ts.ca.issue("system:node:node1", []string{"system:nodes"}, x509.ExtKeyUsageClientAuth)
	if code, body := get(t, ts.client(&node), ts.url+"/shutdown"); code != http.StatusForbidden || !strings.Contains(body, "Forbidden") {
		t.Errorf("GET /shutdown as a node: %d %q", code, body)
	}
	if len(got) != 1 {
		t.Errorf("handler called for a forbidden client: %v", got)
	}

	plain := startServer(t, nil)
	if code, _ := get(t, plain.apiserver(), plain.url+"/shutdown"); code != http.StatusNotFound {
		t.Errorf("/shutdown without a handler: %d, want 404", code)
	}
}
