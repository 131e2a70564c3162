package volume

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/agent/volume/atomicwriter"
)

// Projected service account tokens: requested for the pod with the node's
// credentials, cached, and refreshed as the kubelet's token manager does.

// tokenRefusedForLag: a token request the API server refused because its
// view of pods lags behind the pod: the node authorizer answers Forbidden
// and NodeRestriction also NotFound while its cache does not have the pod.
func tokenRefusedForLag(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsNotFound(err)
}

// tokenKey names one projected token of a pod.
type tokenKey struct {
	pod      types.UID
	audience string
	expiry   int64
}

type cachedToken struct {
	token     string
	issued    time.Time
	expiresAt time.Time
}

// stale: refreshed at 80% of its lifetime or after 24 h, as the kubelet's token manager.
func (t cachedToken) stale(now time.Time) bool {
	life := t.expiresAt.Sub(t.issued)
	return now.After(t.issued.Add(life*8/10)) || now.After(t.issued.Add(24*time.Hour))
}

// tokenPayload is a service account token bound to the pod, requested with
// the node's credentials (TokenRequest; the node authorizer allows it for
// pods bound to this node).
func (vm *Manager) tokenPayload(ctx context.Context, pod *v1.Pod, tp *v1.ServiceAccountTokenProjection, defaultMode *int32) (map[string]atomicwriter.File, error) {
	key := tokenKey{pod: pod.UID, audience: tp.Audience}
	if tp.ExpirationSeconds != nil {
		key.expiry = *tp.ExpirationSeconds
	}
	now := vm.cfg.Clock.Now()
	vm.mu.Lock()
	tok, ok := vm.tokens[key]
	vm.mu.Unlock()
	if !ok || tok.stale(now) {
		if vm.cfg.Client == nil {
			return nil, errors.New("failed to fetch token: no kubeClient defined")
		}
		var auds []string
		if tp.Audience != "" {
			auds = []string{tp.Audience}
		}
		sa := pod.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		req := &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				Audiences:         auds,
				ExpirationSeconds: tp.ExpirationSeconds,
				BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
			},
		}
		// The node authorizer and NodeRestriction may not know the pod
		// yet: wait for them rather than fail the mount.
		var tr *authenticationv1.TokenRequest
		err := vm.cfg.CatchUp(ctx, pod.UID, "token for service account "+sa, tokenRefusedForLag, func() (err error) {
			tr, err = vm.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("failed to fetch token: %w", err)
		}
		tok = cachedToken{token: tr.Status.Token, issued: now, expiresAt: tr.Status.ExpirationTimestamp.Time}
		vm.mu.Lock()
		vm.tokens[key] = tok
		vm.mu.Unlock()
	}
	f := atomicwriter.File{Data: []byte(tok.token), Mode: fileMode(nil, defaultMode), UID: -1}
	if uid, ok := sharedNonRootUser(pod); ok {
		// Readable by the user every container runs as, and only by it.
		f.UID, f.GID, f.Mode = int(uid), 0, 0o600
	}
	return map[string]atomicwriter.File{tp.Path: f}, nil
}

// sharedNonRootUser is the runAsUser of every container when they all have
// the same non-root one (upstream's FsUser for projected tokens).
func sharedNonRootUser(pod *v1.Pod) (int64, bool) {
	var uid *int64
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range all {
		u := effectiveRunAsUser(pod, &all[i])
		if u == nil || *u == 0 || (uid != nil && *uid != *u) {
			return 0, false
		}
		uid = u
	}
	if uid == nil {
		return 0, false
	}
	return *uid, true
}

func effectiveRunAsUser(pod *v1.Pod, c *v1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.RunAsUser
	}
	return nil
}
