package podworker

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/images"
	"github.com/podvisor/podvisor/internal/runtime"
)

// ensureImage makes c's image present as its pull policy says and returns
// it; the zero Image for a runtime without images. A failure is an
// *images.Failure, the container's waiting reason.
func (w *worker) ensureImage(ctx context.Context, pod *v1.Pod, c *v1.Container) (runtime.Image, error) {
	if w.m.images == nil {
		return runtime.Image{}, nil
	}
	return w.m.images.Ensure(ctx, images.Request{
		Pod: pod, Container: c,
		PullSecrets: func(ctx context.Context) []v1.Secret { return w.m.pullSecrets(ctx, pod) },
	})
}

// pullSecrets reads the pod's imagePullSecrets — the service account's
// are in the pod already, copied by the API server's ServiceAccount
// admission, so the kubelet reads only the pod's. One that cannot be read
// is left out with a warning: the pull is tried anyway, as upstream.
func (m *Manager) pullSecrets(ctx context.Context, pod *v1.Pod) []v1.Secret {
	var secrets []v1.Secret
	var failed []string
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue // validation let empty names through once; upstream skips them silently
		}
		s, err := m.getSecret(ctx, pod.UID, pod.Namespace, ref.Name)
		if err != nil {
			m.cfg.Log.Info("unable to read a pull secret, the image pull may not succeed", "pod", pod.Namespace+"/"+pod.Name, "secret", ref.Name, "err", err)
			failed = append(failed, ref.Name)
			continue
		}
		secrets = append(secrets, *s)
	}
	if len(failed) > 0 {
		m.cfg.Recorder.Event(pod, v1.EventTypeWarning, images.EventFailedToRetrievePullSecret, images.MissingPullSecretsMessage(failed))
	}
	return secrets
}
