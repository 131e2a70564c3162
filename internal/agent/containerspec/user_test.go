package containerspec

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestVerifyRunAsNonRootAsUpstream(t *testing.T) {
	const ref = `(pod: "p_ns(u)", container: c)`
	for _, tc := range []struct {
		name      string
		pod       *v1.PodSecurityContext
		container *v1.SecurityContext
		imageUser string
		want      string // the error; "" none
	}{
		{"not asked", nil, nil, "", ""},
		{"asked off", nil, &v1.SecurityContext{RunAsNonRoot: ptr.To(false)}, "", ""},
		{"no runAsUser, no image user (or no image): root", &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, nil, "",
			"container has runAsNonRoot and image will run as root " + ref},
		{"image user 0", nil, &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}, "0",
			"container has runAsNonRoot and image will run as root " + ref},
		{"image user 65532", nil, &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}, "65532", ""},
		{"image user by name", nil, &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}, "nobody",
			"container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root " + ref},
		{"image user out of range", nil, &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}, "4294967296",
			"container has runAsNonRoot and image has an invalid user id (4294967296). (Must be 1-(2147483647)): must be between 0 and 2147483647, inclusive " + ref},
		{"runAsUser 0 over a non-root image", &v1.PodSecurityContext{RunAsUser: ptr.To[int64](0)}, &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}, "65532",
			"container's runAsUser breaks non-root policy " + ref},
		{"container's runAsUser over pod's", &v1.PodSecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(true)},
			&v1.SecurityContext{RunAsUser: ptr.To[int64](1000)}, "0", ""},
		{"container's runAsNonRoot over pod's", &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			&v1.SecurityContext{RunAsNonRoot: ptr.To(false)}, "0", ""},
	} {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
			Spec: v1.PodSpec{SecurityContext: tc.pod, Containers: []v1.Container{{Name: "c", SecurityContext: tc.container}}}}
		err := VerifyRunAsNonRoot(pod, &pod.Spec.Containers[0], tc.imageUser)
		got := ""
		if err != nil {
			got = err.Error()
			if _, ok := err.(ConfigError); !ok {
				t.Errorf("%s: %T, want a configError (CreateContainerConfigError)", tc.name, err)
			}
		}
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
