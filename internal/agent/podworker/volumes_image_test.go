package podworker

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/podvisor/podvisor/internal/runtime"
)

func imageVolume(name, ref string, policy v1.PullPolicy) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}}
}

// With images: the volume's image is ensured with its own pull policy
// (Always pulls even when present), the Pulled event is the pod's, and the
// container is created with the image mounted.
func TestImageVolumeIsPulledAndMounted(t *testing.T) {
	f := newImageFixture(t)
	f.rt.AddLocal("busybox:1.36", testImage)
	kitten := runtime.Image{ID: "sha256:k1773n", RepoTags: []string{"docker.io/library/kitten:1.8"}, RepoDigests: []string{"docker.io/library/kitten@sha256:k"}, Size: 42}
	f.rt.AddLocal("kitten:1.8", kitten)
	f.rt.AddRemote("kitten:1.8", kitten, nil)
	pod := imagePod("vol", "busybox:1.36", "")
	pod.Spec.Volumes = []v1.Volume{imageVolume("volume", "kitten:1.8", v1.PullAlways)}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "volume", MountPath: "/volume"}}
	f.m.UpdatePod(pod)
	waitStatus(t, f.statuses, pod.UID, "running", runningOne)
	if p := f.rt.Pulls(); len(p) != 1 || p[0].Ref != "kitten:1.8" {
		t.Errorf("pulls %+v, want kitten:1.8 once (Always, though present)", p)
	}
	specs := f.rt.created()
	want := runtime.Mount{ContainerPath: "/volume", ReadOnly: true, Image: kitten.ID, ImageName: "kitten:1.8"}
	if len(specs) != 1 || !slices.Contains(specs[0].Mounts, want) {
		t.Errorf("created %+v, want a container with mount %+v", specs, want)
	}
	if ev := f.drain(); !slices.Contains(ev, `Normal Pulled Successfully pulled image "kitten:1.8" in 0s (0s including waiting). Image size: 42 bytes.`) {
		t.Errorf("events %q", ev)
	}
}

// A volume whose image cannot be pulled holds the container back with
// upstream's reasons: ErrImagePull, then ImagePullBackOff.
func TestImageVolumePullFailureIsTheContainersWaitingReason(t *testing.T) {
	f := newImageFixture(t)
	f.rt.AddLocal("busybox:1.36", testImage)
	pod := imagePod("badvol", "busybox:1.36", "")
	pod.Spec.Volumes = []v1.Volume{imageVolume("volume", "nosuch:1", "")}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "volume", MountPath: "/volume"}}
	f.m.UpdatePod(pod)
	if r := f.nextFailed(t); r != "ErrImagePull" {
		t.Fatalf("failed with %q", r)
	}
	waitStatus(t, f.statuses, pod.UID, "waiting ErrImagePull", func(st v1.PodStatus) bool {
		w := waitingOf(st)
		return w != nil && w.Reason == "ErrImagePull" && strings.Contains(w.Message, "nosuch:1")
	})
	// As a container image's back-off: pulls at 0 and 10 s, then 20 s of
	// ImagePullBackOff.
	var got []string
	for range 2 {
		f.clock.Step(10 * time.Second)
		f.m.worker(pod.UID).poke()
		got = append(got, f.nextFailed(t))
	}
	if !slices.Equal(got, []string{"ErrImagePull", "ImagePullBackOff"}) {
		t.Errorf("retries failed with %v, want [ErrImagePull ImagePullBackOff]", got)
	}
	if len(f.rt.created()) != 0 {
		t.Error("created a container without its volume's image")
	}
}

// The process runtime has no images: a container mounting an image volume
// waits with CreateContainerConfigError naming the volume and the runtime
// that can; the pod's other containers run.
func TestImageVolumeOnTheProcessRuntimeIsAConfigError(t *testing.T) {
	statuses := &statusLog{last: map[types.UID]v1.PodStatus{}}
	m := startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(newFakeRuntime()), Status: statuses, Recorder: record.NewFakeRecorder(100)})
	pod := testPod("procvol")
	pod.Spec.Volumes = []v1.Volume{imageVolume("volume", "kitten:1.8", "")}
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "other", Command: []string{"sleep", "3600"}})
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "volume", MountPath: "/volume"}}
	m.UpdatePod(pod)
	msg := `container "c": volume "volume" is an image volume (volumes[].image), which the process runtime cannot mount: it runs host processes and has no images (use --runtime=containerd)`
	waitStatus(t, statuses, pod.UID, "c waiting CreateContainerConfigError, other running", func(st v1.PodStatus) bool {
		var c, other bool
		for _, cs := range st.ContainerStatuses {
			switch {
			case cs.Name == "c" && cs.State.Waiting != nil:
				c = cs.State.Waiting.Reason == "CreateContainerConfigError" && cs.State.Waiting.Message == msg
			case cs.Name == "other":
				other = cs.State.Running != nil
			}
		}
		return c && other
	})
}
