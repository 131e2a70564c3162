package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
)

func TestConfigMapVolumeIsWrittenThenUpdatedInPlace(t *testing.T) {
	pod := testPod("cm")
	pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}}}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"k": "v1"}}
	f := newFixture(t, pod, cm)
	ctx := context.Background()
	paths, err := f.vm.SetUp(ctx, pod, f.podDir)
	if err != nil {
		t.Fatal(err)
	}
	dir := paths["cfg"]
	if want := filepath.Join(f.podDir, "volumes", "kubernetes.io~configmap", "cfg"); dir != want {
		t.Errorf("volume at %s, want %s", dir, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "k")); string(b) != "v1" {
		t.Errorf("k = %q", b)
	}
	cm.Data["k"] = "v2"
	if _, err := f.client.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.vm.resync(ctx, pod.UID)
	if b, _ := os.ReadFile(filepath.Join(dir, "k")); string(b) != "v2" {
		t.Errorf("k = %q after the update", b)
	}
}

func TestMissingConfigMapVolumeIsAFailedMount(t *testing.T) {
	pod := testPod("missing")
	pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}}}
	f := newFixture(t, pod)
	_, err := f.vm.SetUp(context.Background(), pod, f.podDir)
	want := `MountVolume.SetUp failed for volume "cfg" : configmap "nope" not found`
	var me MountError
	var ce containerspec.ConfigError
	if !errors.As(err, &me) || !errors.As(err, &ce) || err.Error() != want {
		t.Errorf("got %v, want a mount error (a config error) %q", err, want)
	}
	if ev := <-f.rec.Events; ev != "Warning FailedMount "+want {
		t.Errorf("event %q", ev)
	}
	pod.Spec.Volumes[0].ConfigMap.Optional = ptr.To(true)
	if _, err := f.vm.SetUp(context.Background(), pod, f.podDir); err != nil {
		t.Errorf("optional: %v", err)
	}
}
