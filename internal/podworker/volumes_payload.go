package podworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/containerspec"
	"github.com/podvisor/podvisor/internal/volume"
)

// payload is the content of an API-data volume (configMap, secret,
// downwardAPI, projected) as upstream's plugins compute it.
func (vm *volumeManager) payload(ctx context.Context, pod *v1.Pod, v v1.Volume) (map[string]volume.File, error) {
	switch {
	case v.ConfigMap != nil:
		src := v.ConfigMap
		optional := src.Optional != nil && *src.Optional
		cm, err := vm.m.getConfigMap(ctx, pod.UID, pod.Namespace, src.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return map[string]volume.File{}, nil
			}
			return nil, err
		}
		return configMapPayload(src.Items, cm, src.DefaultMode, optional)
	case v.Secret != nil:
		src := v.Secret
		optional := src.Optional != nil && *src.Optional
		s, err := vm.m.getSecret(ctx, pod.UID, pod.Namespace, src.SecretName)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return map[string]volume.File{}, nil
			}
			return nil, err
		}
		return secretPayload(src.Items, s, src.DefaultMode, optional)
	case v.DownwardAPI != nil:
		return vm.downwardPayload(pod, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
	case v.Projected != nil:
		return vm.projectedPayload(ctx, pod, v.Projected)
	}
	return nil, fmt.Errorf("volume %q has no API data", v.Name)
}

func fileMode(item, def *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case def != nil:
		return os.FileMode(*def)
	}
	return 0o644
}

func configMapPayload(items []v1.KeyToPath, cm *v1.ConfigMap, defaultMode *int32, optional bool) (map[string]volume.File, error) {
	out := map[string]volume.File{}
	if len(items) == 0 {
		for k, d := range cm.Data {
			out[k] = volume.File{Data: []byte(d), Mode: fileMode(nil, defaultMode)}
		}
		for k, d := range cm.BinaryData {
			out[k] = volume.File{Data: d, Mode: fileMode(nil, defaultMode)}
		}
		return out, nil
	}
	for _, it := range items {
		var data []byte
		if d, ok := cm.Data[it.Key]; ok {
			data = []byte(d)
		} else if d, ok := cm.BinaryData[it.Key]; ok {
			data = d
		} else if optional {
			continue
		} else {
			return nil, fmt.Errorf("configmap references non-existent config key: %s", it.Key)
		}
		out[it.Path] = volume.File{Data: data, Mode: fileMode(it.Mode, defaultMode)}
	}
	return out, nil
}

func secretPayload(items []v1.KeyToPath, s *v1.Secret, defaultMode *int32, optional bool) (map[string]volume.File, error) {
	out := map[string]volume.File{}
	if len(items) == 0 {
		for k, d := range s.Data {
			out[k] = volume.File{Data: d, Mode: fileMode(nil, defaultMode)}
		}
		return out, nil
	}
	for _, it := range items {
		d, ok := s.Data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("secret references non-existent secret key: %s", it.Key)
		}
		out[it.Path] = volume.File{Data: d, Mode: fileMode(it.Mode, defaultMode)}
	}
	return out, nil
}

func (vm *volumeManager) downwardPayload(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode *int32) (map[string]volume.File, error) {
	out := map[string]volume.File{}
	var errs []error
	for _, it := range items {
		var val string
		var err error
		switch {
		case it.FieldRef != nil:
			val, err = containerspec.FieldValue(pod, it.FieldRef.FieldPath, vm.m.cfg.HostIP, "")
		case it.ResourceFieldRef != nil:
			var alloc v1.ResourceList
			if vm.m.cfg.Allocatable != nil {
				alloc = vm.m.cfg.Allocatable()
			}
			val, err = containerspec.ResourceValue(pod, nil, it.ResourceFieldRef, alloc)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[filepath.Clean(it.Path)] = volume.File{Data: []byte(val), Mode: fileMode(it.Mode, defaultMode)}
	}
	return out, errors.Join(errs...)
}

// projectedPayload merges the sources in order: a path given by two
// sources gets the later one's content, as upstream.
func (vm *volumeManager) projectedPayload(ctx context.Context, pod *v1.Pod, p *v1.ProjectedVolumeSource) (map[string]volume.File, error) {
	out := map[string]volume.File{}
	var errs []error
	merge := func(part map[string]volume.File, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		for k, f := range part {
			out[k] = f
		}
	}
	for _, s := range p.Sources {
		switch {
		case s.ConfigMap != nil:
			optional := s.ConfigMap.Optional != nil && *s.ConfigMap.Optional
			cm, err := vm.m.getConfigMap(ctx, pod.UID, pod.Namespace, s.ConfigMap.Name)
			if err != nil {
				if !apierrors.IsNotFound(err) || !optional {
					errs = append(errs, err)
				}
				continue
			}
			merge(configMapPayload(s.ConfigMap.Items, cm, p.DefaultMode, optional))
		case s.Secret != nil:
			optional := s.Secret.Optional != nil && *s.Secret.Optional
			sec, err := vm.m.getSecret(ctx, pod.UID, pod.Namespace, s.Secret.Name)
			if err != nil {
				if !apierrors.IsNotFound(err) || !optional {
					errs = append(errs, err)
				}
				continue
			}
			merge(secretPayload(s.Secret.Items, sec, p.DefaultMode, optional))
		case s.DownwardAPI != nil:
			merge(vm.downwardPayload(pod, s.DownwardAPI.Items, p.DefaultMode))
		case s.ServiceAccountToken != nil:
			merge(vm.tokenPayload(ctx, pod, s.ServiceAccountToken, p.DefaultMode))
		default:
			errs = append(errs, errors.New("projected volume source not supported by podvisor (clusterTrustBundle, podCertificate)"))
		}
	}
	return out, errors.Join(errs...)
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
func (vm *volumeManager) tokenPayload(ctx context.Context, pod *v1.Pod, tp *v1.ServiceAccountTokenProjection, defaultMode *int32) (map[string]volume.File, error) {
	key := tokenKey{pod: pod.UID, audience: tp.Audience}
	if tp.ExpirationSeconds != nil {
		key.expiry = *tp.ExpirationSeconds
	}
	now := vm.m.cfg.Clock.Now()
	vm.mu.Lock()
	tok, ok := vm.tokens[key]
	vm.mu.Unlock()
	if !ok || tok.stale(now) {
		if vm.m.cfg.Client == nil {
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
		// yet: wait for them rather than fail the mount (apilag.go).
		var tr *authenticationv1.TokenRequest
		err := vm.m.untilCaughtUp(ctx, pod.UID, "token for service account "+sa, tokenRefusedForLag, func() (err error) {
			tr, err = vm.m.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
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
	f := volume.File{Data: []byte(tok.token), Mode: fileMode(nil, defaultMode), UID: -1}
	if uid, ok := sharedNonRootUser(pod); ok {
		// Readable by the user every container runs as, and only by it.
		f.UID, f.GID, f.Mode = int(uid), 0, 0o600
	}
	return map[string]volume.File{tp.Path: f}, nil
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
