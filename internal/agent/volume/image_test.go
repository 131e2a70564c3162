package volume

import (
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/runtime"
)

func imageVolume(name, ref string, policy v1.PullPolicy) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}}
}

// An image volume's mount is the image by its ID, read-only whatever the
// volumeMount says, with subPath (or the expanded subPathExpr) checked as
// upstream's makeMounts and left to the runtime to resolve in the image.
func TestImageVolumeMounts(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{imageVolume("img", "kitten:1.8", "")}}}
	ids := map[string]string{"img": "sha256:k1773n"}
	for _, tc := range []struct {
		name  string
		mount v1.VolumeMount
		want  runtime.Mount
		err   string
	}{
		{"whole image", v1.VolumeMount{Name: "img", MountPath: "/volume"},
			runtime.Mount{ContainerPath: "/volume", ReadOnly: true, Image: "sha256:k1773n", ImageName: "kitten:1.8"}, ""},
		{"read-only always", v1.VolumeMount{Name: "img", MountPath: "/volume", ReadOnly: false},
			runtime.Mount{ContainerPath: "/volume", ReadOnly: true, Image: "sha256:k1773n", ImageName: "kitten:1.8"}, ""},
		{"subPath", v1.VolumeMount{Name: "img", MountPath: "/etc-of-kitten", SubPath: "etc"},
			runtime.Mount{ContainerPath: "/etc-of-kitten", ReadOnly: true, Image: "sha256:k1773n", ImageName: "kitten:1.8", ImageSubPath: "etc"}, ""},
		{"subPathExpr", v1.VolumeMount{Name: "img", MountPath: "/d", SubPathExpr: "$(DIR)/x"},
			runtime.Mount{ContainerPath: "/d", ReadOnly: true, Image: "sha256:k1773n", ImageName: "kitten:1.8", ImageSubPath: "etc/x"}, ""},
		{"absolute subPath", v1.VolumeMount{Name: "img", MountPath: "/d", SubPath: "/etc"}, runtime.Mount{},
			"error SubPath `/etc` must not be an absolute path"},
		{"subPath with ..", v1.VolumeMount{Name: "img", MountPath: "/d", SubPath: "etc/../../x"}, runtime.Mount{},
			"unable to provision SubPath `etc/../../x`: must not contain '..'"},
	} {
		c := &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{tc.mount}}
		got, err := containerMounts(pod, c, map[string]string{"img": ""}, ids, map[string]string{"DIR": "etc"}, Runtime{Mounts: true, Images: true})
		if tc.err != "" {
			var ce containerspec.ConfigError
			if !errors.As(err, &ce) || err.Error() != tc.err {
				t.Errorf("%s: err %v, want the config error %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// Only the image volumes a container mounts are its business, each once.
func TestMountedImageVolumes(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{
		imageVolume("a", "a:1", ""), {Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		imageVolume("b", "b:1", ""), imageVolume("unused", "u:1", ""),
	}}}
	c := &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{{Name: "b"}, {Name: "e"}, {Name: "a"}, {Name: "b", SubPath: "x"}}}
	var names []string
	for _, v := range mountedImageVolumes(pod, c) {
		names = append(names, v.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("mounted image volumes %v, want [a b]", names)
	}
	if why := ImageVolumeUnsupported(pod, &v1.Container{Name: "c"}); why != "" {
		t.Errorf("a container without image volumes: %q", why)
	}
}
