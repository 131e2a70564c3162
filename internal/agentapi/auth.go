package agentapi

import (
	"fmt"
	"net/http"
	"slices"
)

// Identities allowed to use the API: the kube-apiserver's kubelet client
// certificate (internal/controlplane/pki.go) and cluster administrators.
const (
	apiserverClientCN = "kube-apiserver-kubelet-client"
	mastersGroup      = "system:masters"
)

// authorize admits requests whose verified client certificate names an
// allowed user (CN) or group (O), as the apiserver's x509 authenticator reads them.
func (s *Server) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			// Unreachable with RequireAndVerifyClientCert; kept so that the
			// handler is never served without authentication.
			http.Error(w, "Unauthorized: a client certificate is required", http.StatusUnauthorized)
			return
		}
		subject := r.TLS.VerifiedChains[0][0].Subject
		if subject.CommonName == apiserverClientCN || slices.Contains(subject.Organization, mastersGroup) {
			next.ServeHTTP(w, r)
			return
		}
		s.cfg.Log.Info("agent API: forbidden", "user", subject.CommonName, "groups", subject.Organization, "path", r.URL.Path)
		http.Error(w, fmt.Sprintf("Forbidden: user %q (groups %q) may not %s %s on this node: "+
			"the agent API admits only user %q and group %q",
			subject.CommonName, subject.Organization, r.Method, r.URL.Path, apiserverClientCN, mastersGroup),
			http.StatusForbidden)
	})
}
