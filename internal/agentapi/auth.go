package agentapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Identities admitted without asking the API server: the kube-apiserver's
// kubelet client certificate (internal/controlplane/pki.go; kubeadm's has
// the same CN) and cluster administrators.
const (
	apiserverClientCN = "kube-apiserver-kubelet-client"
	mastersGroup      = "system:masters"
)

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

// authorize admits requests whose verified client certificate names the API
// server's identity or group system:masters; other identities are asked of
// the Authorizer when there is one, else refused.
func (s *Server) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			// Unreachable with RequireAndVerifyClientCert; kept so that the
			// handler is never served without authentication.
			http.Error(w, "Unauthorized: a client certificate is required", http.StatusUnauthorized)
			return
		}
		subject := r.TLS.VerifiedChains[0][0].Subject
		user, groups := subject.CommonName, subject.Organization
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
