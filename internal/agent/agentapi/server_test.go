package agentapi

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/logs"
	"github.com/podvisor/podvisor/internal/runtime"
)

// deadline bounds every wait in these tests.
const deadline = 10 * time.Second

// fakeLogs serves logs of containers "ns/pod/name"; previous instances are "ns/pod/name/previous".
type fakeLogs struct {
	paths  map[string]string
	exited atomic.Bool
}

func (f *fakeLogs) LogPath(ns, pod, container string, previous bool) (string, func() bool, error) {
	key := ns + "/" + pod + "/" + container
	if _, ok := f.paths[key]; !ok {
		return "", nil, runtime.NotFoundf("container %q in pod %q is not available", container, pod)
	}
	if previous {
		key += "/previous"
		if _, ok := f.paths[key]; !ok {
			return "", nil, runtime.NotFoundf("previous terminated container %q in pod %q not found", container, pod)
		}
		return f.paths[key], func() bool { return true }, nil
	}
	return f.paths[key], f.exited.Load, nil
}

type testServer struct {
	url  string
	ca   *testCA
	logs *fakeLogs
	dir  string
	stop func() // cancels Run and checks it returned nil promptly
}

func startServer(t *testing.T, edit func(*Config)) *testServer {
	t.Helper()
	ca := newTestCA(t)
	certFile, keyFile := ca.writeServing()
	ts := &testServer{ca: ca, logs: &fakeLogs{paths: map[string]string{}}, dir: t.TempDir()}
	cfg := Config{
		Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, ClientCAFile: filepath.Join(ca.dir, "ca.crt"),
		Logs: ts.logs, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ts.url = "https://" + s.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var stopped bool
	ts.stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(deadline):
			t.Errorf("Run did not return after cancel")
		}
	}
	t.Cleanup(ts.stop)
	return ts
}

// addLog creates the log of a container with the given lines (stdout).
func (ts *testServer) addLog(t *testing.T, key string, lines ...string) (appendLines func(...string)) {
	t.Helper()
	path := filepath.Join(ts.dir, strings.ReplaceAll(key, "/", "_")+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	w := logs.NewWriter(f, logs.Stdout, clock.RealClock{})
	appendLines = func(lines ...string) {
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
	appendLines(lines...)
	ts.logs.paths[key] = path
	return appendLines
}

// client returns an HTTPS client presenting cert (none when nil).
func (ts *testServer) client(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: ts.ca.pool}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: deadline}
}

// apiserver is a client with the kube-apiserver's kubelet client identity.
func (ts *testServer) apiserver() *http.Client {
	c := ts.ca.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, x509.ExtKeyUsageClientAuth)
	return ts.client(&c)
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestAuthorizedClientsGetLogs(t *testing.T) {
	ts := startServer(t, nil)
	ts.addLog(t, "default/web/app", "hello", "world")
	admin := ts.ca.issue("admin", []string{"system:masters"}, x509.ExtKeyUsageClientAuth)
	apiserverOnlyCN := ts.ca.issue("kube-apiserver-kubelet-client", nil, x509.ExtKeyUsageClientAuth)
	for name, c := range map[string]*http.Client{
		"kube-apiserver":               ts.apiserver(),
		"CN alone":                     ts.client(&apiserverOnlyCN),
		"group system:masters (admin)": ts.client(&admin),
	} {
		t.Run(name, func(t *testing.T) {
			code, body := get(t, c, ts.url+"/containerLogs/default/web/app")
			if code != http.StatusOK || body != "hello\nworld\n" {
				t.Errorf("got %d %q", code, body)
			}
		})
	}
}

func TestOtherIdentitiesAreForbidden(t *testing.T) {
	ts := startServer(t, nil)
	ts.addLog(t, "default/web/app", "secret")
	node := ts.ca.issue("system:node:node1", []string{"system:nodes"}, x509.ExtKeyUsageClientAuth)
	for _, path := range []string{"/containerLogs/default/web/app", "/healthz"} {
		code, body := get(t, ts.client(&node), ts.url+path)
		if code != http.StatusForbidden || !strings.Contains(body, `user "system:node:node1"`) || strings.Contains(body, "secret") {
			t.Errorf("GET %s: got %d %q, want 403 naming the user", path, code, body)
		}
	}
}

func TestClientsWithoutTrustedCertificateFailTheHandshake(t *testing.T) {
	ts := startServer(t, nil)
	other := newTestCA(t).issue("kube-apiserver-kubelet-client", []string{"system:masters"}, x509.ExtKeyUsageClientAuth)
	resp, err := ts.client(&other).Get(ts.url + "/healthz")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %s, want a TLS error", resp.Status)
	}
	if !strings.Contains(err.Error(), "tls") {
		t.Errorf("err = %v, want a TLS error", err)
	}
}

func TestClientsWithoutCredentialsAreUnauthorized(t *testing.T) {
	ts := startServer(t, nil)
	if code, body := get(t, ts.client(nil), ts.url+"/healthz"); code != http.StatusUnauthorized || body != "Unauthorized\n" {
		t.Errorf("no certificate, no token: %d %q, want the kubelet's 401", code, body)
	}
}

func TestContainerLogsNotFound(t *testing.T) {
	ts := startServer(t, nil)
	ts.addLog(t, "default/web/app", "x")
	ts.logs.paths["default/web/gone"] = filepath.Join(ts.dir, "removed.log")
	for _, tc := range []struct{ path, want string }{
		{"/containerLogs/default/web/nope", `container "nope" in pod "web" is not available`},
		{"/containerLogs/default/web/app?previous=true", `previous terminated container "app" in pod "web" not found`},
		{"/containerLogs/default/web/gone", `log of container "gone" in pod "web" not found`},
	} {
		code, body := get(t, ts.apiserver(), ts.url+tc.path)
		if code != http.StatusNotFound || strings.TrimSpace(body) != tc.want {
			t.Errorf("GET %s: got %d %q, want 404 %q", tc.path, code, body, tc.want)
		}
	}
}

func TestContainerLogsQuery(t *testing.T) {
	ts := startServer(t, nil)
	ts.addLog(t, "default/web/app", "one", "two", "three")
	ts.addLog(t, "default/web/app/previous", "before restart")
	for _, tc := range []struct{ query, want string }{
		{"", "one\ntwo\nthree\n"},
		{"tailLines=2", "two\nthree\n"},
		{"tail=1", "three\n"},
		{"tail=all", "one\ntwo\nthree\n"},
		{"limitBytes=6", "one\ntw"},
		{"sinceSeconds=3600", "one\ntwo\nthree\n"},
		{"sinceTime=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), ""},
		{"previous=true", "before restart\n"},
		{"previous=false", "one\ntwo\nthree\n"},
		{"stream=Stderr", ""},
		{"stream=All&tailLines=1", "three\n"},
	} {
		code, body := get(t, ts.apiserver(), ts.url+"/containerLogs/default/web/app?"+tc.query)
		if code != http.StatusOK || body != tc.want {
			t.Errorf("?%s: got %d %q, want %q", tc.query, code, body, tc.want)
		}
	}
	code, body := get(t, ts.apiserver(), ts.url+"/containerLogs/default/web/app?timestamps=true&tailLines=1")
	stamp, rest, _ := strings.Cut(body, " ")
	if _, err := time.Parse(logs.TimestampFormat, stamp); code != http.StatusOK || err != nil || rest != "three\n" {
		t.Errorf("timestamps: got %d %q (%v)", code, body, err)
	}
}

func TestContainerLogsInvalidQueryIsBadRequest(t *testing.T) {
	ts := startServer(t, nil)
	ts.addLog(t, "default/web/app", "x")
	for _, q := range []string{
		"tailLines=abc", "tailLines=-1", "limitBytes=0", "limitBytes=1k", "sinceSeconds=0", "sinceSeconds=x",
		"sinceTime=yesterday", "sinceSeconds=5&sinceTime=2025-01-01T00:00:00Z", "stream=stdout", "stream=Stdout&tailLines=3",
	} {
		code, body := get(t, ts.apiserver(), ts.url+"/containerLogs/default/web/app?"+q)
		if code != http.StatusBadRequest || !strings.Contains(body, "invalid log options") {
			t.Errorf("?%s: got %d %q, want 400", q, code, body)
		}
	}
}

func TestContainerLogsFollowStreams(t *testing.T) {
	ts := startServer(t, nil)
	appendLines := ts.addLog(t, "default/web/app", "first")
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+"/containerLogs/default/web/app?follow=true", nil)
	resp, err := ts.apiserver().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readLine := func(want string) {
		t.Helper()
		if line, err := r.ReadString('\n'); err != nil || line != want {
			t.Fatalf("read %q, %v; want %q", line, err, want)
		}
	}
	readLine("first\n")
	// Written after the response started: it arrives only by following.
	appendLines("second")
	readLine("second\n")
	ts.logs.exited.Store(true)
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after exit: read %q, %v; want the end of the stream", rest, err)
	}
}

func TestRunEndsFollowedStreams(t *testing.T) {
	ts := startServer(t, nil)
	ts.addLog(t, "default/web/app", "first")
	resp, err := ts.apiserver().Get(ts.url + "/containerLogs/default/web/app?follow=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	ts.stop() // fails the test if Run waits for the stream
}

func TestOtherEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "podvisor_test_total", Help: "test"})
	reg.MustRegister(counter)
	counter.Add(3)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	ts := startServer(t, func(c *Config) {
		c.Metrics = reg
		c.Pods = func() []*v1.Pod { return []*v1.Pod{pod} }
	})
	c := ts.apiserver()

	if code, body := get(t, c, ts.url+"/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, c, ts.url+"/metrics"); code != http.StatusOK || !strings.Contains(body, "podvisor_test_total 3") {
		t.Errorf("/metrics: %d %q", code, body)
	}
	code, body := get(t, c, ts.url+"/pods")
	var list v1.PodList
	if err := json.Unmarshal([]byte(body), &list); code != http.StatusOK || err != nil ||
		list.Kind != "PodList" || len(list.Items) != 1 || list.Items[0].Name != "web" {
		t.Errorf("/pods: %d %q (%v)", code, body, err)
	}
	for _, p := range []string{"/exec/default/web/app?command=ls", "/attach/default/web/app", "/portForward/default/web"} {
		if code, body := get(t, c, ts.url+p); code != http.StatusNotImplemented || !strings.Contains(body, "without a runtime for exec") {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
}

func TestListenReportsPortInUse(t *testing.T) {
	ts := startServer(t, nil)
	ca := newTestCA(t)
	certFile, keyFile := ca.writeServing()
	s, err := New(Config{Addr: strings.TrimPrefix(ts.url, "https://"), CertFile: certFile, KeyFile: keyFile,
		ClientCAFile: filepath.Join(ca.dir, "ca.crt"), Logs: ts.logs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Listen: %v, want address in use", err)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := ca.writeServing()
	good := Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: filepath.Join(ca.dir, "ca.crt"), Logs: &fakeLogs{}}
	for name, edit := range map[string]func(*Config){
		"no certificate":    func(c *Config) { c.CertFile = "" },
		"missing key file":  func(c *Config) { c.KeyFile = filepath.Join(ca.dir, "none.key") },
		"no client CA":      func(c *Config) { c.ClientCAFile = "" },
		"client CA not PEM": func(c *Config) { c.ClientCAFile = keyFile },
		"no log source":     func(c *Config) { c.Logs = nil },
	} {
		cfg := good
		edit(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted the config", name)
		}
	}
	s, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.Addr != DefaultAddr {
		t.Errorf("default address %q", s.cfg.Addr)
	}
}
