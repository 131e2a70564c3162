package e2e

import (
	"context"
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

// Image volumes (volumes[].image) on the containerd runtime, pulled with
// policy Always through a registry mirror (registries.yaml pointing
// registry.k8s.io at a registry on 127.0.0.1), as upstream's ImageVolume
// conformance spec: the files are read from inside the container, the
// volume is read-only, subPath mounts a directory of the image; an image
// that no registry has holds the container back with upstream's reasons.
func TestContainerdImageVolumes(t *testing.T) {
	t.Parallel()
	needContainerd(t)
	reg := images.NewRegistry()
	t.Cleanup(reg.Close)
	const volumeImage = "registry.k8s.io/podvisor-test/files:1"
	img, err := imagebuild.Image{
		Names: []string{volumeImage},
		Files: []imagebuild.File{
			imagebuild.Regular("/data.json", 0o644, []byte(`{"image": "kitten.jpg"}`)),
			imagebuild.Dir("/etc", 0o755),
			imagebuild.Regular("/etc/os-release", 0o644, []byte("NAME=\"Alpine Linux\"\n")),
		},
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Push(volumeImage, img); err != nil {
		t.Fatal(err)
	}
	p := NewContainerdPodvisor(t)
	yaml := "mirrors:\n  registry.k8s.io:\n    endpoint: [\"" + reg.URL() + "\"]\n"
	if err := os.WriteFile(filepath.Join(p.DataDir, "registries.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Start()
	ns := p.Namespace("imagevol")
	ctx := context.Background()

	t.Run("pulled with Always through the mirror, read from inside", func(t *testing.T) {
		pod := p.imagePod(ns, "reader", images.BusyboxImage, v1.RestartPolicyAlways, []string{"sleep", "3600"}, nil)
		pod.Spec.Volumes = []v1.Volume{{Name: "volume", VolumeSource: v1.VolumeSource{
			Image: &v1.ImageVolumeSource{Reference: volumeImage, PullPolicy: v1.PullAlways}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
			{Name: "volume", MountPath: "/volume"},
			{Name: "volume", MountPath: "/etc-of-volume", SubPath: "etc"},
		}
		p.create(t, pod)
		p.waitPod(t, ns, "reader", 2*time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		for _, tc := range []struct{ file, want string }{
			{"/volume/data.json", "kitten.jpg"},
			{"/volume/etc/os-release", "Alpine Linux"},
			{"/etc-of-volume/os-release", "Alpine Linux"},
		} {
			out, stderr, code := p.kubectl(t, "", nil, "exec", "-n", ns, "reader", "--", "cat", tc.file)
			if code != 0 || !strings.Contains(out, tc.want) {
				t.Errorf("cat %s: exit %d, %q %q; want %q", tc.file, code, out, stderr, tc.want)
			}
		}
		if _, _, code := p.kubectl(t, "", nil, "exec", "-n", ns, "reader", "--", "touch", "/volume/new"); code == 0 {
			t.Error("wrote into the image volume, which is read-only")
		}
		if asked := strings.Join(reg.Requests(), "\n"); !strings.Contains(asked, "/v2/podvisor-test/files/manifests/1") {
			t.Errorf("the mirror was not asked for the volume's image:\n%s", asked)
		}
		// The volume's pull events are the pod's: no container field path.
		evs, err := p.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Pulling,involvedObject.name=reader"})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs.Items {
			found = found || e.Message == `Pulling image "`+volumeImage+`"` && e.InvolvedObject.FieldPath == ""
		}
		if !found {
			t.Errorf("no Pulling event of %s on the pod itself: %+v", volumeImage, evs.Items)
		}
	})

	t.Run("an image no registry has: ErrImagePull, then ImagePullBackOff", func(t *testing.T) {
		const missing = "registry.k8s.io/podvisor-test/nosuch:1"
		pod := p.imagePod(ns, "missing", images.BusyboxImage, v1.RestartPolicyAlways, []string{"sleep", "3600"}, nil)
		pod.Spec.Volumes = []v1.Volume{{Name: "volume", VolumeSource: v1.VolumeSource{
			Image: &v1.ImageVolumeSource{Reference: missing}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "volume", MountPath: "/volume"}}
		p.create(t, pod)
		waitingReason := func(pod *v1.Pod) string {
			if cs := containerStatus(pod, "c"); cs != nil && cs.State.Waiting != nil {
				return cs.State.Waiting.Reason
			}
			return ""
		}
		p.waitPod(t, ns, "missing", time.Minute, "waiting ErrImagePull", func(pod *v1.Pod) bool { return waitingReason(pod) == "ErrImagePull" })
		p.waitPod(t, ns, "missing", time.Minute, "waiting ImagePullBackOff", func(pod *v1.Pod) bool {
			cs := containerStatus(pod, "c")
			return waitingReason(pod) == "ImagePullBackOff" && strings.HasPrefix(cs.State.Waiting.Message, `Back-off pulling image "`+missing+`"`)
		})
		p.waitEventMessage(t, ns, "missing", "Failed", "Error: ImagePullBackOff")
	})
}
