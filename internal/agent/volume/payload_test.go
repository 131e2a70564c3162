package volume

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func TestConfigMapPayloadItemsModesAndMissingKeys(t *testing.T) {
	cm := &v1.ConfigMap{Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {0, 1}}}
	all, err := configMapPayload(nil, cm, ptr.To[int32](0o600), false)
	if err != nil || len(all) != 2 || string(all["a"].Data) != "1" || all["b"].Mode != 0o600 {
		t.Errorf("all keys: %+v %v", all, err)
	}
	items := []v1.KeyToPath{{Key: "a", Path: "dir/a.txt", Mode: ptr.To[int32](0o400)}, {Key: "missing", Path: "m"}}
	if _, err := configMapPayload(items, cm, nil, false); err == nil || err.Error() != "configmap references non-existent config key: missing" {
		t.Errorf("missing key: %v", err)
	}
	got, err := configMapPayload(items, cm, nil, true)
	if err != nil || len(got) != 1 || got["dir/a.txt"].Mode != 0o400 {
		t.Errorf("optional: %+v %v", got, err)
	}
	if _, err := secretPayload([]v1.KeyToPath{{Key: "x", Path: "x"}}, &v1.Secret{}, nil, false); err == nil || err.Error() != "secret references non-existent secret key: x" {
		t.Errorf("secret missing key: %v", err)
	}
}

// A projected volume merges its sources in order, a later source's path
// winning, as upstream; an optional missing object adds nothing, a missing
// required one fails the volume.
func TestProjectedPayloadMergesSourcesInOrder(t *testing.T) {
	pod := testPod("projected")
	pod.Labels = map[string]string{"app": "x"}
	objs := []k8sruntime.Object{
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"a": "from-cm", "b": "cm-b"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Data: map[string][]byte{"a": []byte("from-secret")}},
	}
	f := newFixture(t, pod, objs...)
	src := &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}},
		{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "s"}}},
		{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: ptr.To(true)}},
		{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}},
	}}
	got, err := f.vm.projectedPayload(context.Background(), pod, src)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "from-secret", "b": "cm-b", "labels": `app="x"`}
	if len(got) != len(want) {
		t.Errorf("payload %v, want the paths of %v", got, want)
	}
	for p, w := range want {
		if string(got[p].Data) != w {
			t.Errorf("%s = %q, want %q", p, got[p].Data, w)
		}
	}
	src.Sources[2].ConfigMap.Optional = nil
	if _, err := f.vm.projectedPayload(context.Background(), pod, src); err == nil || err.Error() != `configmap "absent" not found` {
		t.Errorf("a missing required configMap: %v", err)
	}
}
