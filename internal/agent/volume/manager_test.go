package volume

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
	"github.com/podvisor/podvisor/internal/agent/volume/csivolume"
	"github.com/podvisor/podvisor/internal/host/mounts"
)

// configMapPod is pod "cm" with volume "cfg" of ConfigMap "cm".
func configMapPod() *v1.Pod {
	pod := testPod("cm")
	pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}}}
	return pod
}

func TestConfigMapVolumeIsWrittenThenUpdatedInPlace(t *testing.T) {
	pod := configMapPod()
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

// An agent that starts while a pod runs (a restart) adopts the volumes the
// agent before it set up: they follow their ConfigMap again without
// waiting for a container start, on the kick of the pod's first update and
// on the periodic resync alike. A pod whose volumes were never set up is
// not adopted (its SetUp does that).
func TestVolumesSetUpBeforeARestartAreKeptCurrent(t *testing.T) {
	pod := configMapPod()
	fresh := testPod("fresh")
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"k": "v1"}}
	f := newFixture(t, pod, cm)
	ctx := context.Background()
	paths, err := f.vm.SetUp(ctx, pod, f.podDir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(paths["cfg"], "k")
	f.pods.pods[fresh.UID] = fresh

	for _, how := range []string{"kick", "periodic"} {
		// The agent restarts: a new manager over the same pods directory.
		restarted, err := New(f.vm.cfg)
		if err != nil {
			t.Fatal(err)
		}
		value := "after-" + how
		cm.Data["k"] = value
		if _, err := f.client.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if how == "kick" {
			restarted.resync(ctx, pod.UID)
			restarted.resync(ctx, fresh.UID)
		} else {
			restarted.resyncAll(ctx)
		}
		if b, _ := os.ReadFile(file); string(b) != value {
			t.Errorf("%s: k = %q after the agent restarted, want %q", how, b, value)
		}
		restarted.mu.Lock()
		_, adopted := restarted.pods[fresh.UID]
		restarted.mu.Unlock()
		if adopted {
			t.Errorf("%s: a pod whose volumes were never set up was adopted", how)
		}
	}
}

// An adopted pod's CSI volumes count as published where their target is
// still mounted (an agent restart), and not where it is gone (a reboot), so
// that the next container start publishes them again.
func TestAdoptedCSIVolumesArePublishedOnlyWhereMounted(t *testing.T) {
	pod := testPod("csi")
	f := newFixture(t, pod)
	for _, r := range []csivolume.Record{
		{SpecVolID: "pv-mounted", VolumeHandle: "h1", DriverName: "d", PodVolume: "data"},
		{SpecVolID: "pv-gone", VolumeHandle: "h2", DriverName: "d", PodVolume: "scratch"},
	} {
		if err := writeRecord(f.podDir, r); err != nil {
			t.Fatal(err)
		}
	}
	mounted := noderequest.PublishPath(f.podDir, "pv-mounted")
	mountPoints = func() []string { return []string{"/", mounted} }
	t.Cleanup(func() { mountPoints = mounts.Points })
	pv := f.vm.adopt(pod.UID)
	if pv == nil {
		t.Fatal("a live pod with volumes on disk was not adopted")
	}
	if want := map[string]bool{"data": true}; !maps.Equal(pv.published, want) {
		t.Errorf("published = %v, want %v", pv.published, want)
	}
	if !pv.set || pv.dir != f.podDir {
		t.Errorf("adopted set=%v dir=%s, want set in %s", pv.set, pv.dir, f.podDir)
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
