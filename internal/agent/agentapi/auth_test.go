package agentapi

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// recordingAuthorizer allows what allow names ("verb subresource", or
// "user verb subresource") and
// records what it was asked.
type recordingAuthorizer struct {
	mu    sync.Mutex
	allow map[string]bool
	asked []string
}

func (a *recordingAuthorizer) Authorize(_ context.Context, user string, groups []string, verb, sub string) (bool, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, user+" "+verb+" "+sub)
	return a.allow[verb+" "+sub] || a.allow[user+" "+verb+" "+sub], "", nil
}

func TestOtherIdentitiesAreAskedOfTheAuthorizer(t *testing.T) {
	az := &recordingAuthorizer{allow: map[string]bool{"get proxy": true}}
	ts := startServer(t, func(c *Config) { c.Authorizer = az })
	ts.addLog(t, "default/web/app", "hello")
	viewer := ts.ca.issue("viewer", []string{"team"}, x509.ExtKeyUsageClientAuth)
	c := ts.client(&viewer)

	if code, body := get(t, c, ts.url+"/containerLogs/default/web/app"); code != http.StatusOK || body != "hello\n" {
		t.Errorf("logs with get nodes/proxy: %d %q", code, body)
	}
	// /healthz asks the fine-grained subresource, then proxy.
	if code, _ := get(t, c, ts.url+"/healthz"); code != http.StatusOK {
		t.Errorf("healthz with get nodes/proxy: %d", code)
	}
	if code, body := get(t, c, ts.url+"/metrics"); code != http.StatusForbidden ||
		!strings.Contains(body, "Forbidden (user=viewer, verb=get, resource=nodes, subresource=metrics)") {
		t.Errorf("metrics without get nodes/metrics: %d %q", code, body)
	}
	want := []string{"viewer get proxy", "viewer get healthz", "viewer get proxy", "viewer get metrics"}
	if strings.Join(az.asked, "|") != strings.Join(want, "|") {
		t.Errorf("asked %q, want %q", az.asked, want)
	}
	// The API server's identity is not asked about.
	az.asked = nil
	if code, _ := get(t, ts.apiserver(), ts.url+"/healthz"); code != http.StatusOK || len(az.asked) != 0 {
		t.Errorf("apiserver: %d, asked %q", code, az.asked)
	}
}

func TestRequestAttributes(t *testing.T) {
	for _, tt := range []struct{ method, path, verb, sub, fallback string }{
		{"GET", "/containerLogs/ns/p/c", "get", "proxy", ""},
		{"POST", "/exec/ns/p/c", "create", "proxy", ""},
		{"GET", "/exec/ns/p/c", "get", "proxy", ""},
		{"GET", "/metrics/cadvisor", "get", "metrics", ""},
		{"GET", "/stats/summary", "get", "stats", ""},
		{"GET", "/logs/syslog", "get", "log", ""},
		{"GET", "/pods", "get", "pods", "proxy"},
		{"DELETE", "/shutdown", "delete", "proxy", ""},
	} {
		r, _ := http.NewRequest(tt.method, "https://node"+tt.path, nil)
		verb, sub, fb := requestAttributes(r)
		if verb != tt.verb || sub != tt.sub || fb != tt.fallback {
			t.Errorf("%s %s = %s %s %s, want %s %s %s", tt.method, tt.path, verb, sub, fb, tt.verb, tt.sub, tt.fallback)
		}
	}
}

func TestSubjectAccessReviewsAskOnceAndCache(t *testing.T) {
	client := fake.NewSimpleClientset()
	var asked []*authorizationv1.SubjectAccessReview
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		asked = append(asked, sar)
		sar.Status.Allowed = sar.Spec.User == "alice"
		return true, sar, nil
	})
	now := time.Unix(1000, 0)
	a := &SubjectAccessReviews{Client: client, NodeName: "n1", Now: func() time.Time { return now }}
	ctx := context.Background()
	check := func(user string, want bool) {
		t.Helper()
		ok, _, err := a.Authorize(ctx, user, []string{"g"}, "get", "proxy")
		if err != nil || ok != want {
			t.Fatalf("%s: %v %v, want %v", user, ok, err, want)
		}
	}
	check("alice", true)
	check("bob", false)
	if len(asked) != 2 {
		t.Fatalf("%d reviews, want 2", len(asked))
	}
	ra := asked[0].Spec.ResourceAttributes
	if ra.Resource != "nodes" || ra.Subresource != "proxy" || ra.Name != "n1" || ra.Verb != "get" || asked[0].Spec.User != "alice" {
		t.Errorf("review %+v", asked[0].Spec)
	}
	now = now.Add(29 * time.Second)
	check("alice", true)
	check("bob", false)
	if len(asked) != 2 {
		t.Fatalf("cached answers asked again: %d reviews", len(asked))
	}
	now = now.Add(2 * time.Second) // a denial lasts 30 s, an approval 5 min
	check("alice", true)
	check("bob", false)
	if len(asked) != 3 || asked[2].Spec.User != "bob" {
		t.Fatalf("after 31 s: %d reviews, want bob asked again", len(asked))
	}
}

// tokenReviews is a fake API server answering TokenReviews (over HTTP: the
// library's webhook client posts through the REST client, which the fake
// clientset lacks): tokens maps a token to its user (group "sa-group"); it
// counts the reviews asked.
func tokenReviews(t *testing.T, tokens map[string]string) (authenticationclient.AuthenticationV1Interface, *atomic.Int32) {
	n := new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr authenticationv1.TokenReview
		if r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" || json.NewDecoder(r.Body).Decode(&tr) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		n.Add(1)
		if user, ok := tokens[tr.Spec.Token]; ok && len(tr.Spec.Audiences) == 0 {
			tr.Status.Authenticated = true
			tr.Status.User = authenticationv1.UserInfo{Username: user, Groups: []string{"sa-group"}}
		} else {
			tr.Status.Error = "invalid bearer token"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&tr)
	}))
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return client.AuthenticationV1(), n
}

func getWithToken(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestBearerTokensAreReviewedAndAuthorized(t *testing.T) {
	const scraper, other = "system:serviceaccount:mon:scraper", "system:serviceaccount:mon:other"
	reviews, asked := tokenReviews(t, map[string]string{"good": scraper, "unbound": other})
	az := &recordingAuthorizer{allow: map[string]bool{scraper + " get metrics": true}}
	ts := startServer(t, func(c *Config) {
		c.Authorizer = az
		c.TokenReviews = reviews
		c.Metrics = prometheus.NewRegistry()
	})
	anon := ts.client(nil)

	if code, _ := getWithToken(t, anon, ts.url+"/metrics", "good"); code != http.StatusOK {
		t.Errorf("allowed token: %d", code)
	}
	if code, _ := getWithToken(t, anon, ts.url+"/metrics", "good"); code != http.StatusOK || asked.Load() != 1 {
		t.Errorf("allowed token again: %d, %d reviews, want the first answer cached", code, asked.Load())
	}
	if code, body := getWithToken(t, anon, ts.url+"/metrics", "unbound"); code != http.StatusForbidden ||
		body != "Forbidden (user="+other+", verb=get, resource=nodes, subresource=metrics)\n" {
		t.Errorf("token without the role: %d %q, want the kubelet's Forbidden", code, body)
	}
	for _, tok := range []string{"garbage", ""} {
		if code, body := getWithToken(t, anon, ts.url+"/metrics", tok); code != http.StatusUnauthorized || body != "Unauthorized\n" {
			t.Errorf("token %q: %d %q, want 401", tok, code, body)
		}
	}
	// A verified certificate is the identity, whatever the token says.
	viewer := ts.ca.issue("viewer", []string{"team"}, x509.ExtKeyUsageClientAuth)
	getWithToken(t, ts.client(&viewer), ts.url+"/metrics", "good")
	want := []string{scraper + " get metrics", scraper + " get metrics", other + " get metrics", "viewer get metrics"}
	if strings.Join(az.asked, "|") != strings.Join(want, "|") {
		t.Errorf("asked %q, want %q", az.asked, want)
	}
}

func TestTokensIgnoredWithoutTokenReviews(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.Authorizer = &recordingAuthorizer{} })
	if code, _ := getWithToken(t, ts.client(nil), ts.url+"/healthz", "any"); code != http.StatusUnauthorized {
		t.Errorf("token without TokenReviews configured: %d, want 401", code)
	}
}

// The profiles are the kubelet's debugging handlers: nodes/proxy, and
// only where profiling is on.
func TestProfilingHandlerNeedsProxyAndCanBeTurnedOff(t *testing.T) {
	az := &recordingAuthorizer{allow: map[string]bool{"profiler get proxy": true}}
	ts := startServer(t, func(c *Config) { c.Authorizer = az; c.Profiling = true })
	profiler := ts.ca.issue("profiler", nil, x509.ExtKeyUsageClientAuth)
	viewer := ts.ca.issue("viewer", nil, x509.ExtKeyUsageClientAuth)
	if code, body := get(t, ts.client(&profiler), ts.url+"/debug/pprof/heap?debug=1"); code != http.StatusOK || !strings.Contains(body, "heap profile:") {
		t.Errorf("heap with get nodes/proxy: %d %.200q", code, body)
	}
	if code, body := get(t, ts.client(&profiler), ts.url+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("index: %d %.200q", code, body)
	}
	if code, body := get(t, ts.client(&viewer), ts.url+"/debug/pprof/heap"); code != http.StatusForbidden ||
		!strings.Contains(body, "subresource=proxy") {
		t.Errorf("heap without nodes/proxy: %d %q", code, body)
	}

	off := startServer(t, nil)
	if code, _ := get(t, off.apiserver(), off.url+"/debug/pprof/heap"); code != http.StatusNotFound {
		t.Errorf("heap with profiling off: %d, want 404", code)
	}
}
