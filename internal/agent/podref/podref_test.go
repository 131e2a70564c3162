package podref

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContainer(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", ResourceVersion: "7"},
		Spec: v1.PodSpec{
			InitContainers:      []v1.Container{{Name: "init"}},
			Containers:          []v1.Container{{Name: "app"}},
			EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "debug"}}},
		},
	}
	for name, want := range map[string]string{
		"init":  "spec.initContainers{init}",
		"app":   "spec.containers{app}",
		"debug": "spec.ephemeralContainers{debug}",
		"other": "spec.containers{other}",
		"":      "",
	} {
		ref := Container(pod, name)
		if ref.FieldPath != want || ref.Kind != "Pod" || ref.APIVersion != "v1" || ref.Namespace != "ns" ||
			ref.Name != "p" || ref.UID != "u" || ref.ResourceVersion != "7" {
			t.Errorf("%s: %+v, want field path %s on pod ns/p", name, ref, want)
		}
	}
}
