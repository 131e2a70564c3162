package httpget

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
)

func TestSameHostRedirects(t *testing.T) {
	req := func(u string) *http.Request {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Request{URL: p}
	}
	first := req("http://10.0.0.5:8080/healthz")
	if err := SameHostRedirects(req("http://10.0.0.5:9090/other"), []*http.Request{first}); err != nil {
		t.Errorf("same host, other port: %v, want followed", err)
	}
	if err := SameHostRedirects(req("http://10.0.0.6:8080/healthz"), []*http.Request{first}); !errors.Is(err, http.ErrUseLastResponse) {
		t.Errorf("other host: %v, want the redirect handed back", err)
	}
	via := make([]*http.Request, 10)
	for i := range via {
		via[i] = first
	}
	if err := SameHostRedirects(req("http://10.0.0.5:8080/again"), via); err == nil || errors.Is(err, http.ErrUseLastResponse) {
		t.Errorf("11th redirect: %v, want an error stopping the chain", err)
	}
}
