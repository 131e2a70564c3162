package images

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestParseNameDefaultsTagAndNormalisesTheRepository(t *testing.T) {
	const dgst = "sha256:2d4e459f4ecb5329407ae3e47cbc107a2fbace221354ca75960af4c047b3cb13"
	for _, tc := range []struct {
		image string
		want  Name
	}{
		{"busybox", Name{Pull: "busybox:latest", Repository: "docker.io/library/busybox", Tag: "latest"}},
		{"busybox:1.36", Name{Pull: "busybox:1.36", Repository: "docker.io/library/busybox", Tag: "1.36"}},
		{"busybox:latest", Name{Pull: "busybox:latest", Repository: "docker.io/library/busybox", Tag: "latest"}},
		{"user/app", Name{Pull: "user/app:latest", Repository: "docker.io/user/app", Tag: "latest"}},
		{"docker.io/library/busybox", Name{Pull: "docker.io/library/busybox:latest", Repository: "docker.io/library/busybox", Tag: "latest"}},
		{"registry.k8s.io/pause:3.10.2", Name{Pull: "registry.k8s.io/pause:3.10.2", Repository: "registry.k8s.io/pause", Tag: "3.10.2"}},
		{"localhost:5000/app", Name{Pull: "localhost:5000/app:latest", Repository: "localhost:5000/app", Tag: "latest"}},
		// A digest pins the image: no tag is added.
		{"busybox@" + dgst, Name{Pull: "busybox@" + dgst, Repository: "docker.io/library/busybox", Digest: dgst}},
		{"busybox:1.36@" + dgst, Name{Pull: "busybox:1.36@" + dgst, Repository: "docker.io/library/busybox", Tag: "1.36", Digest: dgst}},
	} {
		got, err := ParseName(tc.image)
		if err != nil || got != tc.want {
			t.Errorf("ParseName(%q) = %+v, %v; want %+v", tc.image, got, err, tc.want)
		}
	}
}

// InvalidImageName's message is upstream's, with the distribution
// library's reason.
func TestParseNameRejectsMalformedNamesWithUpstreamsMessage(t *testing.T) {
	for _, tc := range []struct{ image, want string }{
		{"Busybox", `couldn't parse image name "Busybox": invalid reference format: repository name (library/Busybox) must be lowercase`},
		{"busy box", `couldn't parse image name "busy box": invalid reference format`},
		{"", `couldn't parse image name "": invalid reference format`},
		{"busybox:", `couldn't parse image name "busybox:": invalid reference format`},
	} {
		_, err := ParseName(tc.image)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseName(%q): %v, want %q", tc.image, err, tc.want)
		}
	}
	_, err := ParseName("Busybox")
	want := `Failed to apply default image tag "Busybox": couldn't parse image name "Busybox": invalid reference format: repository name (library/Busybox) must be lowercase`
	if got := invalidNameMessage("Busybox", err); got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

func TestPullPolicyAsAPIDefaulting(t *testing.T) {
	const dgst = "@sha256:2d4e459f4ecb5329407ae3e47cbc107a2fbace221354ca75960af4c047b3cb13"
	for _, tc := range []struct {
		image string
		set   v1.PullPolicy
		want  v1.PullPolicy
	}{
		{"busybox", "", v1.PullAlways},
		{"busybox:latest", "", v1.PullAlways},
		{"busybox:1.36", "", v1.PullIfNotPresent},
		{"busybox" + dgst, "", v1.PullIfNotPresent},
		{"busybox:latest" + dgst, "", v1.PullAlways}, // the tag decides, as upstream
		{"Not Valid", "", v1.PullIfNotPresent},
		{"busybox", v1.PullNever, v1.PullNever},
		{"busybox:1.36", v1.PullAlways, v1.PullAlways},
	} {
		c := &v1.Container{Image: tc.image, ImagePullPolicy: tc.set}
		if got := PullPolicy(c); got != tc.want {
			t.Errorf("PullPolicy(%q, %q) = %q, want %q", tc.image, tc.set, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		policy  v1.PullPolicy
		present bool
		want    step
	}{
		{v1.PullAlways, true, stepPull},
		{v1.PullAlways, false, stepPull},
		{v1.PullIfNotPresent, true, stepUseLocal},
		{v1.PullIfNotPresent, false, stepPull},
		{v1.PullNever, true, stepUseLocal},
		{v1.PullNever, false, stepNeverPull},
		{"Sometimes", false, stepPull}, // upstream: no presence check, a pull
	} {
		if got := decide(tc.policy, tc.present); got != tc.want {
			t.Errorf("decide(%q, present=%v) = %v, want %v", tc.policy, tc.present, got, tc.want)
		}
	}
	for policy, want := range map[v1.PullPolicy]bool{v1.PullAlways: false, v1.PullIfNotPresent: true, v1.PullNever: true} {
		if got := needsPresence(policy); got != want {
			t.Errorf("needsPresence(%q) = %v, want %v", policy, got, want)
		}
	}
}

// An image volume's pullPolicy defaults from its reference as a
// container's (upstream's SetDefaults_ImageVolumeSource).
func TestVolumePullPolicy(t *testing.T) {
	for _, tc := range []struct {
		ref  string
		set  v1.PullPolicy
		want v1.PullPolicy
	}{
		{"image", "", v1.PullAlways},
		{"image:latest", "", v1.PullAlways},
		{"image:v1", "", v1.PullIfNotPresent},
		{"image:v1", v1.PullAlways, v1.PullAlways},
		{"image", v1.PullNever, v1.PullNever},
	} {
		if got := VolumePullPolicy(&v1.ImageVolumeSource{Reference: tc.ref, PullPolicy: tc.set}); got != tc.want {
			t.Errorf("VolumePullPolicy(%q, %q) = %q, want %q", tc.ref, tc.set, got, tc.want)
		}
	}
}
