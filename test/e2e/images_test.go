package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/test/images"
)

// Images on the containerd runtime, through the real API server: the
// kubelet's image manager's reasons, messages and events (upstream v1.36,
// internal/agent/images), and the service account's pull secrets reaching the
// agent through the ServiceAccount admission. No registry is reachable.
func TestContainerdImagePullSemantics(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	importImages(t, p.DataDir, "busybox")
	ns := p.Namespace("pulls")
	ctx := context.Background()

	t.Run("present image: no pull, the runtime's image and imageID", func(t *testing.T) {
		p.create(t, p.imagePod(ns, "present", images.BusyboxImage, v1.RestartPolicyNever, []string{"true"}, nil))
		pod := p.waitPod(t, ns, "present", time.Minute, "Succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
		// containerd reports the image's first tag (the imported busybox has
		// two), and its repo digest or else its ID, as it does to the kubelet.
		cs := containerStatus(pod, "c")
		if cs.Image != images.BusyboxImage && cs.Image != images.BusyboxLatestImage ||
			!strings.HasPrefix(cs.ImageID, "sha256:") && !strings.Contains(cs.ImageID, "@sha256:") {
			t.Errorf("image %q imageID %q, want a tag of busybox and its ID or digest", cs.Image, cs.ImageID)
		}
		// The pulled-image credential check (on by default, as upstream's)
		// lets every pod use an image the agent did not pull, and says so.
		p.waitEventMessage(t, ns, "present", "Pulled", `Container image "`+images.BusyboxImage+`" already present on machine and can be accessed by the pod`)
	})

	t.Run("absent with Never", func(t *testing.T) {
		pod := p.imagePod(ns, "never", "podvisor.test/nosuch:1", v1.RestartPolicyNever, nil, nil)
		pod.Spec.Containers[0].ImagePullPolicy = v1.PullNever
		p.create(t, pod)
		msg := `Container image "podvisor.test/nosuch:1" is not present with pull policy of Never`
		p.waitPod(t, ns, "never", time.Minute, "waiting ErrImageNeverPull", func(pod *v1.Pod) bool {
			cs := containerStatus(pod, "c")
			return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "ErrImageNeverPull" && cs.State.Waiting.Message == msg
		})
		p.waitEventMessage(t, ns, "never", "ErrImageNeverPull", msg)
		p.waitEventMessage(t, ns, "never", "Failed", "Error: ErrImageNeverPull")
	})

	t.Run("unreachable registry, pull secrets from the service account", func(t *testing.T) {
		// The ServiceAccount admission copies the account's pull secrets into
		// a pod that names none; the agent reads the pod's.
		sa, err := p.Admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sa.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}, {Name: "missing"}}
		if _, err := p.Admin.CoreV1().ServiceAccounts(ns).Update(ctx, sa, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Admin.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "regcred"}, Type: v1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"registry.invalid":{"auth":"dTpw"}}}`)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		const image = "registry.invalid/nosuch:1"
		created := p.create(t, p.imagePod(ns, "unreachable", image, v1.RestartPolicyAlways, nil, nil))
		if len(created.Spec.ImagePullSecrets) != 2 {
			t.Fatalf("pod's imagePullSecrets %v, want the service account's", created.Spec.ImagePullSecrets)
		}
		waiting := func(pod *v1.Pod) *v1.ContainerStateWaiting {
			if cs := containerStatus(pod, "c"); cs != nil && cs.State.Waiting != nil {
				return cs.State.Waiting
			}
			return &v1.ContainerStateWaiting{}
		}
		var pullErr string
		p.waitPod(t, ns, "unreachable", time.Minute, "waiting ErrImagePull", func(pod *v1.Pod) bool {
			if w := waiting(pod); w.Reason == "ErrImagePull" {
				pullErr = w.Message
			}
			return pullErr != ""
		})
		t.Logf("ErrImagePull: %s", pullErr)
		if !strings.Contains(pullErr, `failed to pull and unpack image "`+image+`"`) && !strings.Contains(pullErr, "registry.invalid") {
			t.Errorf("ErrImagePull message %q", pullErr)
		}
		// The back-off (10 s, then 20 s) outlasts the worker's 10 s retry.
		p.waitPod(t, ns, "unreachable", time.Minute, "waiting ImagePullBackOff", func(pod *v1.Pod) bool {
			w := waiting(pod)
			return w.Reason == "ImagePullBackOff" && strings.HasPrefix(w.Message, `Back-off pulling image "`+image+`": ErrImagePull: `)
		})
		p.waitEventMessage(t, ns, "unreachable", "Pulling", `Pulling image "`+image+`"`)
		p.waitEventMessage(t, ns, "unreachable", "BackOff", `Back-off pulling image "`+image+`"`)
		p.waitEventMessage(t, ns, "unreachable", "Failed", "Error: ImagePullBackOff")
		// regcred was read (through the node authorizer's graph of pull
		// secrets); only the missing one is reported.
		p.waitEventMessage(t, ns, "unreachable", "FailedToRetrieveImagePullSecret",
			"Unable to retrieve some image pull secrets (missing); attempting to pull the image may not succeed.")
	})
}

// waitEventMessage waits for an event of reason with exactly msg on pod.
func (p *Podvisor) waitEventMessage(t *testing.T, ns, pod, reason, msg string) {
	t.Helper()
	Eventually(t, 30*time.Second, "event "+reason+" "+msg+" on "+pod, func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == pod {
				if e.Message == msg {
					return true, nil
				}
				seen = append(seen, e.Message)
			}
		}
		return false, fmt.Errorf("%s events of the pod: %q", reason, seen)
	})
}
