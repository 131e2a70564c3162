package hook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// received is what a hook server saw of one request.
type received struct {
	path, query, host string
	header            http.Header
	tls, close        bool
}

// hookServer starts a real server answering status and reporting each request.
func hookServer(t *testing.T, tlsOn bool, status int) (port int, got <-chan received) {
	t.Helper()
	ch := make(chan received, 10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch <- received{r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), r.TLS != nil, r.Close}
		w.WriteHeader(status)
	})
	var srv *httptest.Server
	if tlsOn {
		srv = httptest.NewTLSServer(h) // self-signed
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port, ch
}

func httpHook(scheme v1.URIScheme, port intstr.IntOrString, path string, headers ...v1.HTTPHeader) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Scheme: scheme, Port: port, Path: path, HTTPHeaders: headers}}
}

func receivedOne(t *testing.T, got <-chan received) received {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("the hook server received nothing")
	}
	return received{}
}

func runHTTP(t *testing.T, c *v1.Container, h *v1.LifecycleHandler) runResult {
	t.Helper()
	return await(t, runAsync(context.Background(), New(Config{}), PostStart, c, "127.0.0.1", h, 0), 10*time.Second)
}

// §7: httpGet is sent by the agent to the pod IP, with the hook's path and headers.
func TestHTTPHookIsSentToThePodWithPathAndHeaders(t *testing.T) {
	port, got := hookServer(t, false, http.StatusOK)
	res := runHTTP(t, &v1.Container{Name: "c"}, httpHook("", intstr.FromInt(port), "/hooks/start?x=1",
		v1.HTTPHeader{Name: "X-Token", Value: "abc"},
		v1.HTTPHeader{Name: "X-Multi", Value: "a"},
		v1.HTTPHeader{Name: "X-Multi", Value: "b"},
		v1.HTTPHeader{Name: "Host", Value: "hooks.example"}))
	if res.err != nil {
		t.Fatalf("Run = %q, %v", res.msg, res.err)
	}
	r := receivedOne(t, got)
	if r.path != "/hooks/start" || r.query != "x=1" {
		t.Errorf("path %q query %q", r.path, r.query)
	}
	if r.header.Get("X-Token") != "abc" || fmt.Sprint(r.header.Values("X-Multi")) != "[a b]" || r.host != "hooks.example" {
		t.Errorf("headers %v host %q", r.header, r.host)
	}
	if r.header.Get("User-Agent") != "kube-lifecycle/1.36" || r.header.Get("Accept") != "*/*" {
		t.Errorf("default headers: User-Agent %q Accept %q", r.header.Get("User-Agent"), r.header.Get("Accept"))
	}
	if !r.close || r.tls {
		t.Errorf("Connection: close %v, TLS %v; want no keep-alive over plain HTTP", r.close, r.tls)
	}
}

// §7: scheme HTTPS, the pod's certificate is not verified (it is self-signed here).
func TestHTTPSHookSkipsCertificateVerification(t *testing.T) {
	port, got := hookServer(t, true, http.StatusNoContent)
	res := runHTTP(t, &v1.Container{Name: "c"}, httpHook(v1.URISchemeHTTPS, intstr.FromInt(port), "/stop"))
	if res.err != nil {
		t.Fatalf("Run = %q, %v", res.msg, res.err)
	}
	if r := receivedOne(t, got); !r.tls || r.path != "/stop" {
		t.Errorf("server got TLS %v path %q", r.tls, r.path)
	}
}

// As upstream: an HTTPS hook answered in plain HTTP is retried in HTTP.
func TestHTTPSHookFallsBackToHTTP(t *testing.T) {
	port, got := hookServer(t, false, http.StatusOK)
	res := runHTTP(t, &v1.Container{Name: "c"}, httpHook(v1.URISchemeHTTPS, intstr.FromInt(port), "/stop"))
	if res.err != nil {
		t.Fatalf("Run = %q, %v", res.msg, res.err)
	}
	if r := receivedOne(t, got); r.tls || r.path != "/stop" {
		t.Errorf("server got TLS %v path %q", r.tls, r.path)
	}
}

// As upstream: the lifecycle handler does not look at the status; any response succeeds.
func TestHTTPHookAnyResponseSucceedsAsUpstream(t *testing.T) {
	for _, status := range []int{http.StatusOK, http.StatusFound, http.StatusNotFound, http.StatusInternalServerError} {
		port, got := hookServer(t, false, status)
		if res := runHTTP(t, &v1.Container{Name: "c"}, httpHook("", intstr.FromInt(port), "/x")); res.err != nil {
			t.Errorf("status %d: %q, %v", status, res.msg, res.err)
		}
		receivedOne(t, got)
	}
}

// Errors reach users: nobody listening fails at once, saying so.
func TestHTTPHookToAClosedPortFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	res := await(t, runAsync(context.Background(), New(Config{}), PostStart, &v1.Container{Name: "c"}, "127.0.0.1", httpHook("", intstr.FromInt(port), "/x"), 0), 5*time.Second)
	want := fmt.Sprintf(`HTTP lifecycle hook (/x) for Container "c" in Pod "p_ns(uid)" failed - error: Get "http://127.0.0.1:%d/x": dial tcp 127.0.0.1:%d: connect: connection refused`, port, port)
	if res.err == nil || res.msg != want {
		t.Fatalf("got %q, %v\nwant %q", res.msg, res.err, want)
	}
}

// §7: the port may name one of the container's ports.
func TestHTTPHookNamedPort(t *testing.T) {
	port, got := hookServer(t, false, http.StatusOK)
	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "metrics", ContainerPort: 1}, {Name: "web", ContainerPort: int32(port)}}}
	if res := runHTTP(t, c, httpHook("", intstr.FromString("web"), "/named")); res.err != nil {
		t.Fatalf("Run = %q, %v", res.msg, res.err)
	}
	if r := receivedOne(t, got); r.path != "/named" {
		t.Errorf("path %q", r.path)
	}
	// A number written as a string is that number, as upstream.
	if res := runHTTP(t, c, httpHook("", intstr.FromString(strconv.Itoa(port)), "/numeric")); res.err != nil {
		t.Fatalf("Run = %q, %v", res.msg, res.err)
	}
	receivedOne(t, got)
}

// Errors reach users: an unknown port name fails with a clear message, sending nothing.
func TestHTTPHookUnknownPortName(t *testing.T) {
	_, got := hookServer(t, false, http.StatusOK)
	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: 8080}}}
	res := runHTTP(t, c, httpHook("", intstr.FromString("admin"), "/x"))
	want := `HTTP lifecycle hook (/x) for Container "c" in Pod "p_ns(uid)" failed - error: port "admin" not found in the ports of container "c"`
	if res.err == nil || res.msg != want {
		t.Fatalf("got %q, %v\nwant %q", res.msg, res.err, want)
	}
	select {
	case r := <-got:
		t.Errorf("server received %+v", r)
	default:
	}
}

func TestHTTPHookWithoutPodIPFails(t *testing.T) {
	res := await(t, runAsync(context.Background(), New(Config{}), PostStart, &v1.Container{Name: "c"}, "", httpHook("", intstr.FromInt(80), "/x"), 0), 5*time.Second)
	want := `HTTP lifecycle hook (/x) for Container "c" in Pod "p_ns(uid)" failed - error: the pod has no IP to send the hook to`
	if res.err == nil || res.msg != want {
		t.Fatalf("got %q, %v\nwant %q", res.msg, res.err, want)
	}
}

// §8: an HTTP preStop that does not answer within its budget is cut off.
func TestHTTPHookPastItsBudgetIsCutOff(t *testing.T) {
	gone := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // never answers; ends when the agent hangs up
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-release: // the test is over: let srv.Close return
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	res := await(t, runAsync(context.Background(), New(Config{}), PreStop, &v1.Container{Name: "c"}, "127.0.0.1", httpHook("", intstr.FromInt(port), "/slow"), 200*time.Millisecond), 5*time.Second)
	if !errorsIsBudget(res.err) {
		t.Fatalf("err %v, want ErrBudgetExceeded", res.err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the request was not cancelled")
	}
}

// As upstream: redirects on the same host are followed; one to another host
// is not, and counts as the response.
func TestHTTPHookFollowsSameHostRedirectsOnly(t *testing.T) {
	otherPort, other := hookServer(t, false, http.StatusOK)
	final := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/final", http.StatusFound)
		case "/away":
			http.Redirect(w, r, fmt.Sprintf("http://localhost:%d/elsewhere", otherPort), http.StatusFound)
		default:
			final <- r.URL.Path
		}
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	if res := runHTTP(t, &v1.Container{Name: "c"}, httpHook("", intstr.FromInt(port), "/same")); res.err != nil {
		t.Fatalf("Run = %q, %v", res.msg, res.err)
	}
	select {
	case p := <-final:
		if p != "/final" {
			t.Errorf("redirect reached %q", p)
		}
	default:
		t.Error("a same-host redirect was not followed")
	}
	if res := runHTTP(t, &v1.Container{Name: "c"}, httpHook("", intstr.FromInt(port), "/away")); res.err != nil {
		t.Fatalf("Run = %q, %v", res.msg, res.err)
	}
	select {
	case r := <-other:
		t.Errorf("a redirect to another host was followed: %+v", r)
	default:
	}
}
