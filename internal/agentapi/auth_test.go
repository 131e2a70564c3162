package agentapi

import (
	"context"
	"crypto/x509"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// recordingAuthorizer allows what allow names ("verb subresource") and
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
	return a.allow[verb+" "+sub], "", nil
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
