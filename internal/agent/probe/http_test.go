package probe

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func testEnv() env {
	return env{exec: (&fakeExec{calls: map[string]int{}}).run, http: newHTTPProber(), userAgent: "kube-probe/1.36"}
}

func serverPort(t *testing.T, s *httptest.Server) int {
	t.Helper()
	u, _ := url.Parse(s.URL)
	p, _ := strconv.Atoi(u.Port())
	return p
}

// runHTTP runs an httpGet probe once against host 127.0.0.1 (the pod IP).
func runHTTP(t *testing.T, g *v1.HTTPGetAction, c *v1.Container, timeout time.Duration) outcome {
	t.Helper()
	p := &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: g}}
	tm := timingOf(readiness, p)
	if timeout > 0 {
		tm.timeout = timeout
	}
	if c == nil {
		c = &v1.Container{Name: "app"}
	}
	return runWithRetries(context.Background(), newAction(testEnv(), tm, p, c, "id", "127.0.0.1"))
}

func TestHTTPStatusDecidesTheResult(t *testing.T) {
	for _, tc := range []struct {
		code   int
		want   result
		output string
	}{
		{200, resultSuccess, "body"},
		{204, resultSuccess, ""},
		{399, resultWarning, "Probe terminated redirects, Response body: body"},
		{400, resultFailure, "HTTP probe failed with statuscode: 400"},
		{500, resultFailure, "HTTP probe failed with statuscode: 500"},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.code)
				if tc.code != 204 {
					fmt.Fprint(w, "body")
				}
			}))
			defer s.Close()
			o := runHTTP(t, &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(serverPort(t, s))}, nil, 0)
			if o.result != tc.want || o.output != tc.output || o.err != nil {
				t.Errorf("got %v %q %v, want %v %q", o.result, o.output, o.err, tc.want, tc.output)
			}
		})
	}
}

// §6: User-Agent kube-probe/<major>.<minor> and Accept */* unless the probe
// sets them; the probe's headers, path and query go through.
func TestHTTPRequestShape(t *testing.T) {
	var got *http.Request
	s := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.Clone(context.Background()) }))
	defer s.Close()
	port := intstr.FromInt(serverPort(t, s))
	o := runHTTP(t, &v1.HTTPGetAction{Path: "/check?deep=1", Port: port, HTTPHeaders: []v1.HTTPHeader{{Name: "x-custom", Value: "v"}}}, nil, 0)
	if o.result != resultSuccess {
		t.Fatalf("%+v", o)
	}
	if got.Header.Get("User-Agent") != "kube-probe/1.36" || got.Header.Get("Accept") != "*/*" || got.Header.Get("X-Custom") != "v" ||
		got.URL.Path != "/check" || got.URL.RawQuery != "deep=1" || got.Header.Get("Accept-Encoding") != "" {
		t.Errorf("request %v %v", got.URL, got.Header)
	}
	runHTTP(t, &v1.HTTPGetAction{Port: port, HTTPHeaders: []v1.HTTPHeader{
		{Name: "User-Agent", Value: "mine"}, {Name: "Accept", Value: ""}, {Name: "Host", Value: "example.test"},
	}}, nil, 0)
	if got.Header.Get("User-Agent") != "mine" || got.Header["Accept"] != nil || got.Host != "example.test" {
		t.Errorf("overridden headers %v host %q", got.Header, got.Host)
	}
}

// Keep-alives are off: every probe opens its own connection.
func TestHTTPDoesNotReuseConnections(t *testing.T) {
	var conns atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	defer s.Close()
	p := &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt(serverPort(t, s))}}}
	a := newAction(testEnv(), timingOf(readiness, p), p, &v1.Container{}, "id", "127.0.0.1")
	for range 3 {
		if o := a.run(context.Background()); o.result != resultSuccess {
			t.Fatalf("%+v", o)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections for 3 probes", n)
	}
}

// §6: a redirect to the same host is followed; one to another host is a
// success with a warning carrying the response body.
func TestHTTPRedirects(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }))
	defer other.Close()
	otherPort := serverPort(t, other)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/same-host-other-port":
			// Same host name: followed, and that server says 500.
			http.Redirect(w, r, fmt.Sprintf("http://127.0.0.1:%d/", otherPort), http.StatusFound)
		case "/other":
			w.Header().Set("Location", fmt.Sprintf("http://localhost:%d/", otherPort))
			w.WriteHeader(http.StatusMovedPermanently)
			fmt.Fprint(w, "moved")
		case "/ok":
			fmt.Fprint(w, "fine")
		}
	}))
	defer s.Close()
	port := intstr.FromInt(serverPort(t, s))
	if o := runHTTP(t, &v1.HTTPGetAction{Path: "/same", Port: port}, nil, 0); o.result != resultSuccess || o.output != "fine" {
		t.Errorf("same host: %+v", o)
	}
	if o := runHTTP(t, &v1.HTTPGetAction{Path: "/same-host-other-port", Port: port}, nil, 0); o.result != resultFailure {
		t.Errorf("same host, other port: %+v", o)
	}
	if o := runHTTP(t, &v1.HTTPGetAction{Path: "/other", Port: port}, nil, 0); o.result != resultWarning ||
		o.output != "Probe terminated redirects, Response body: moved" {
		t.Errorf("other host: %+v", o)
	}
}

func TestHTTPSDoesNotCheckCertificates(t *testing.T) {
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "secure") }))
	defer s.Close()
	o := runHTTP(t, &v1.HTTPGetAction{Scheme: v1.URISchemeHTTPS, Port: intstr.FromInt(serverPort(t, s))}, nil, 0)
	if o.result != resultSuccess || o.output != "secure" {
		t.Errorf("%+v", o)
	}
}

// §6: a timeout is a failure.
func TestHTTPTimeoutIsFailure(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	defer s.Close()
	begin := time.Now()
	o := runHTTP(t, &v1.HTTPGetAction{Port: intstr.FromInt(serverPort(t, s))}, nil, 200*time.Millisecond)
	if o.result != resultFailure || !strings.Contains(o.output, "Client.Timeout exceeded") {
		t.Errorf("%+v", o)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestHTTPConnectionErrorsAreFailures(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if o := runHTTP(t, &v1.HTTPGetAction{Port: intstr.FromInt(closed)}, nil, 0); o.result != resultFailure || !strings.Contains(o.output, "connection refused") {
		t.Errorf("closed port: %+v", o)
	}
	if o := runHTTP(t, &v1.HTTPGetAction{Host: "no-such-host.invalid", Port: intstr.FromInt(80)}, nil, 0); o.result != resultFailure || !strings.Contains(o.output, "no-such-host.invalid") {
		t.Errorf("unresolvable host: %+v", o)
	}
}

func TestHTTPNamedPort(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer s.Close()
	c := &v1.Container{Name: "app", Ports: []v1.ContainerPort{{Name: "metrics", ContainerPort: 1}, {Name: "http", ContainerPort: int32(serverPort(t, s))}}}
	if o := runHTTP(t, &v1.HTTPGetAction{Port: intstr.FromString("http")}, c, 0); o.result != resultSuccess {
		t.Errorf("named port: %+v", o)
	}
	if o := runHTTP(t, &v1.HTTPGetAction{Port: intstr.FromString(strconv.Itoa(serverPort(t, s)))}, c, 0); o.result != resultSuccess {
		t.Errorf("number as string: %+v", o)
	}
	o := runHTTP(t, &v1.HTTPGetAction{Port: intstr.FromString("web")}, c, 0)
	if o.result != resultUnknown || o.err == nil || o.err.Error() != `port "web" not found in the ports of container "app"` {
		t.Errorf("missing named port: %+v", o)
	}
}

func TestHTTPBodyIsBounded(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(strings.Repeat("a", 3*maxOutput)))
	}))
	defer s.Close()
	if o := runHTTP(t, &v1.HTTPGetAction{Port: intstr.FromInt(serverPort(t, s))}, nil, 0); o.result != resultSuccess || len(o.output) != maxOutput {
		t.Errorf("result %v, %d bytes of body", o.result, len(o.output))
	}
}

// §6 through the manager: a redirect to another host keeps the container
// ready and records a ProbeWarning event.
func TestRedirectToOtherHostIsSuccessWithProbeWarning(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", "http://example.invalid/")
		w.WriteHeader(http.StatusFound)
		fmt.Fprint(w, `<a href="http://example.invalid/">Found</a>.`)
	}))
	defer s.Close()
	h := newHarness(t)
	h.add(testPod(v1.Container{ReadinessProbe: &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt(serverPort(t, s))}},
		PeriodSeconds: 1,
	}}), "c1")
	if !h.m.State("c1").Ready {
		t.Error("not ready after a redirect to another host")
	}
	want := `Warning ProbeWarning Readiness probe warning: Probe terminated redirects, Response body: <a href="http://example.invalid/">Found</a>.`
	if ev := h.events(); !hasEvent(ev, want) {
		t.Errorf("events %q", ev)
	}
}
