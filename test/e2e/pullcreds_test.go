package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
	"github.com/podvisor/podvisor/test/images"
)

// Issue 28 item 5, the pulled-image credential check (KEP-2535, the
// kubelet's KubeletEnsureSecretPulledImages, on by default in 1.36): an
// image pulled from a private registry (on 127.0.0.1, basic auth) with one
// namespace's pull secret is not run for a pod without a working
// credential just because it is on the node — with IfNotPresent that pod
// pulls it and is refused, with Never it waits with ErrImageNeverPull — a
// pod holding the same credential in another secret uses the present image
// without pulling, and images imported onto the node (preloaded) are not
// checked.
func TestPulledImageCredentialCheck(t *testing.T) {
	t.Parallel()
	needContainerd(t)
	reg := images.NewRegistry()
	t.Cleanup(reg.Close)
	private := reg.Host() + "/team/app:1"
	recipe, err := images.Image("busybox")
	if err != nil {
		t.Fatal(err)
	}
	// A file of its own, so that its ID is not the imported busybox's.
	recipe.Names = []string{private}
	recipe.Files = append(recipe.Files, imagebuild.Regular("/private", 0o644, []byte("private\n")))
	img, err := recipe.Build()
	if err != nil {
		t.Fatal(err)
	}
	reg.RequireBasicAuth("alice", "s3cret")
	if err := reg.Push(private, img); err != nil {
		t.Fatal(err)
	}

	p := NewContainerdPodvisor(t)
	// Plain HTTP on loopback; containerd's fallback (https to the same
	// address) stays on this machine too.
	yaml := fmt.Sprintf("mirrors:\n  %q:\n    endpoint: [%q]\n", reg.Host(), reg.URL())
	if err := os.WriteFile(filepath.Join(p.DataDir, "registries.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Start()
	owner, other := p.Namespace("pullcreds-owner"), p.Namespace("pullcreds-other")
	ctx := context.Background()
	pullSecret := func(ns, name string) {
		t.Helper()
		auths := fmt.Sprintf(`{"auths":{%q:{"username":"alice","password":"s3cret"}}}`, reg.Host())
		if _, err := p.Admin.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Type: v1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(auths)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podOf := func(ns, name string, policy v1.PullPolicy, secret string) *v1.Pod {
		pod := p.imagePod(ns, name, private, v1.RestartPolicyAlways, []string{"sh", "-c", "cat /private; sleep 3600"}, nil)
		pod.Spec.Containers[0].ImagePullPolicy = policy
		if secret != "" {
			pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: secret}}
		}
		return pod
	}
	running := func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning }
	waitingWith := func(reasons ...string) func(pod *v1.Pod) bool {
		return func(pod *v1.Pod) bool {
			cs := containerStatus(pod, "c")
			if cs == nil || cs.State.Waiting == nil {
				return false
			}
			for _, r := range reasons {
				if cs.State.Waiting.Reason == r {
					return true
				}
			}
			return false
		}
	}
	manifestGets := func() int {
		n := 0
		for _, r := range reg.Requests() {
			if strings.Contains(r, "/manifests/") {
				n++
			}
		}
		return n
	}

	pullSecret(owner, "regcred")
	p.create(t, podOf(owner, "owner", v1.PullIfNotPresent, "regcred"))
	p.waitPod(t, owner, "owner", 2*time.Minute, "Running (pulled with its secret)", running)

	// No credential: the present image is pulled again for it, and refused.
	p.create(t, podOf(other, "no-secret", v1.PullIfNotPresent, ""))
	p.waitPod(t, other, "no-secret", 2*time.Minute, "waiting ErrImagePull or ImagePullBackOff",
		waitingWith("ErrImagePull", "ImagePullBackOff"))
	p.create(t, podOf(other, "never", v1.PullNever, ""))
	p.waitPod(t, other, "never", 2*time.Minute, "waiting ErrImageNeverPull", waitingWith("ErrImageNeverPull"))
	p.waitEventMessage(t, other, "never", "ErrImageNeverPull", `Container image "`+private+`" is not present with pull policy of Never`)
	p.deletePod(t, other, "no-secret", 0)
	p.waitGone(t, other, "no-secret", time.Minute)

	// The same credential in another namespace's secret: used as present.
	pullSecret(other, "copy")
	before := manifestGets()
	p.create(t, podOf(other, "copy", v1.PullIfNotPresent, "copy"))
	p.waitPod(t, other, "copy", 2*time.Minute, "Running (same credential, no pull)", running)
	p.waitEventMessage(t, other, "copy", "Pulled", `Container image "`+private+`" already present on machine and can be accessed by the pod`)
	if after := manifestGets(); after != before {
		t.Errorf("the registry served %d manifest requests for a pod whose credential the node already checked", after-before)
	}

	// A preloaded image is not checked (NeverVerifyPreloadedImages).
	pre := p.imagePod(other, "preloaded", images.BusyboxImage, v1.RestartPolicyAlways, []string{"sleep", "3600"}, nil)
	pre.Spec.Containers[0].ImagePullPolicy = v1.PullNever
	p.create(t, pre)
	p.waitPod(t, other, "preloaded", 2*time.Minute, "Running (preloaded image)", running)

	// The records survive a restart of the agent: the pod without a
	// credential is still refused under Never.
	p.Stop()
	p.Start()
	p.create(t, podOf(other, "never-after-restart", v1.PullNever, ""))
	p.waitPod(t, other, "never-after-restart", 2*time.Minute, "waiting ErrImageNeverPull after a restart", waitingWith("ErrImageNeverPull"))
}
