package agentapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/options"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// Identities admitted without asking the API server: the kube-apiserver's
// kubelet client certificate (internal/controlplane/pki.go; kubeadm's has
// the same CN) and cluster administrators.
const (
	apiserverClientCN = "kube-apiserver-kubelet-client"
	mastersGroup      = "system:masters"
)

// TokenCacheTTL is how long a TokenReview's answer is reused: the kubelet's
// default authentication.webhook.cacheTTL.
const TokenCacheTTL = 2 * time.Minute

// newAuthenticator builds the kubelet's request authenticator: a verified
// client certificate of the cluster CA is its CN and O (as user and
// groups); otherwise, with tokens, the bearer token's TokenReview (the API
// server's default audiences, as the kubelet) names the user. Anonymous
// requests are not admitted (kubeadm's and podvisor's kubelet default).
func newAuthenticator(caPEM []byte, tokens authenticationclient.AuthenticationV1Interface) (authenticator.Request, error) {
	ca, err := dynamiccertificates.NewStaticCAContent("client-ca", caPEM)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	cfg := authenticatorfactory.DelegatingAuthenticatorConfig{
		ClientCertificateCAContentProvider: ca,
		CacheTTL:                           TokenCacheTTL,
	}
	if tokens != nil {
		cfg.TokenAccessReviewClient = tokens
		cfg.WebhookRetryBackoff = options.DefaultAuthWebhookRetryBackoff()
	}
	authn, _, err := cfg.New()
	return authn, err
}

// Authorizer decides whether a user may do verb on this node's subresource,
// as the kubelet's webhook authorization does: a SubjectAccessReview for
// resource nodes, name = the node (SubjectAccessReviews in this package).
type Authorizer interface {
	Authorize(ctx context.Context, user string, groups []string, verb, subresource string) (allowed bool, reason string, err error)
}

// requestAttributes maps a request to the kubelet's authorization
// attributes: the verb from the method, the subresource from the path
// (https://kubernetes.io/docs/reference/access-authn-authz/kubelet-authn-authz/#kubelet-authorization);
// fallback is the subresource asked when the first is denied ("proxy" for
// the fine-grained /pods and /healthz).
func requestAttributes(r *http.Request) (verb, subresource, fallback string) {
	switch r.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodGet, http.MethodHead:
		verb = "get"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch first {
	case "stats", "metrics", "spec", "checkpoint", "configz":
		return verb, first, ""
	case "logs":
		return verb, "log", ""
	case "pods", "healthz":
		return verb, first, "proxy"
	}
	return verb, "proxy", ""
}

// authorize authenticates the request (client certificate, else bearer
// token; neither is 401 Unauthorized as the kubelet says it) and admits the
// API server's identity and group system:masters; other identities are
// asked of the Authorizer when there is one, else refused.
func (s *Server) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok, err := s.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				// An expired or garbage token, or the API server unreachable.
				s.cfg.Log.Info("agent API: unauthenticated request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		// The token is the API server's to see, not the handlers'.
		r.Header.Del("Authorization")
		user, groups := res.User.GetName(), res.User.GetGroups()
		if user == apiserverClientCN || slices.Contains(groups, mastersGroup) {
			next.ServeHTTP(w, r)
			return
		}
		if s.cfg.Authorizer == nil {
			s.cfg.Log.Info("agent API: forbidden", "user", user, "groups", groups, "path", r.URL.Path)
			http.Error(w, fmt.Sprintf("Forbidden: user %q (groups %q) may not %s %s on this node: "+
				"the agent API admits only user %q and group %q",
				user, groups, r.Method, r.URL.Path, apiserverClientCN, mastersGroup),
				http.StatusForbidden)
			return
		}
		verb, sub, fallback := requestAttributes(r)
		allowed, reason, err := s.cfg.Authorizer.Authorize(r.Context(), user, groups, verb, sub)
		if err == nil && !allowed && fallback != "" {
			sub = fallback
			allowed, reason, err = s.cfg.Authorizer.Authorize(r.Context(), user, groups, verb, sub)
		}
		if err != nil {
			s.cfg.Log.Warn("agent API: authorization", "user", user, "path", r.URL.Path, "err", err)
			http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s)", user, verb, sub), http.StatusInternalServerError)
			return
		}
		if !allowed {
			s.cfg.Log.Info("agent API: forbidden", "user", user, "groups", groups, "verb", verb, "subresource", sub, "reason", reason)
			// The kubelet's text.
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=%s)", user, verb, sub), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
