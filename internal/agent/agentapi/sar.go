package agentapi

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SubjectAccessReviews authorizes agent API requests by asking the API
// server (a SubjectAccessReview with the node's own credentials, which the
// system:node role allows), caching answers as the kubelet does: allowed
// for 5 minutes, denied for 30 seconds.
type SubjectAccessReviews struct {
	Client   kubernetes.Interface
	NodeName string
	Now      func() time.Time // nil: time.Now

	mu    sync.Mutex
	cache map[string]sarAnswer
}

type sarAnswer struct {
	allowed bool
	reason  string
	until   time.Time
}

const (
	allowedTTL = 5 * time.Minute
	deniedTTL  = 30 * time.Second
)

// Authorize implements Authorizer.
func (a *SubjectAccessReviews) Authorize(ctx context.Context, user string, groups []string, verb, subresource string) (bool, string, error) {
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	key := strings.Join([]string{user, strings.Join(slices.Sorted(slices.Values(groups)), ","), verb, subresource}, "\x00")
	a.mu.Lock()
	if ans, ok := a.cache[key]; ok && now().Before(ans.until) {
		a.mu.Unlock()
		return ans.allowed, ans.reason, nil
	}
	a.mu.Unlock()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "nodes", Subresource: subresource, Name: a.NodeName},
	}}
	res, err := a.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	ttl := deniedTTL
	if res.Status.Allowed {
		ttl = allowedTTL
	}
	a.mu.Lock()
	if a.cache == nil || len(a.cache) > 1000 {
		a.cache = map[string]sarAnswer{}
	}
	a.cache[key] = sarAnswer{allowed: res.Status.Allowed, reason: res.Status.Reason, until: now().Add(ttl)}
	a.mu.Unlock()
	return res.Status.Allowed, res.Status.Reason, nil
}
