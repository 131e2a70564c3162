package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/containerspec"
	"github.com/podvisor/podvisor/internal/mounts"
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

func TestSubPathStaysInsideTheVolume(t *testing.T) {
	vol := t.TempDir()
	os.Symlink("/etc", filepath.Join(vol, "escape"))
	if _, err := subPath(vol, "escape"); err == nil {
		t.Error("a symlink out of the volume was accepted")
	}
	if _, err := subPath(vol, "../x"); err == nil {
		t.Error("'..' was accepted")
	}
	p, err := subPath(vol, "made/here")
	if err != nil || !strings.HasSuffix(p, "made/here") {
		t.Errorf("new subPath: %q %v", p, err)
	}
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		t.Errorf("subPath not created: %v", err)
	}
}

// A subPath that does not exist under a symlink out of the volume used to be
// created where the link points (MkdirAll before the check): a pod could make
// directories anywhere on the host (the hostile-specs e2e test checks it too).
func TestSubPathCreatesNothingOutsideTheVolume(t *testing.T) {
	vol, outside := t.TempDir(), t.TempDir()
	os.Symlink(outside, filepath.Join(vol, "link"))
	os.Symlink("link", filepath.Join(vol, "chain"))
	os.Mkdir(filepath.Join(vol, "real"), 0o755)
	os.Symlink("real", filepath.Join(vol, "inside"))
	os.Symlink(filepath.Join(vol, "real"), filepath.Join(vol, "absinside"))
	for _, sub := range []string{"link/newdir", "link/a/b/c", "chain/newdir", "./link/x", "real/../link/y"} {
		if _, err := subPath(vol, sub); err == nil {
			t.Errorf("%s: accepted", sub)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("created outside the volume: %v", entries)
	}
	// Symlinks that stay inside are followed, as upstream.
	for sub, want := range map[string]string{"inside/new": "real/new", "absinside/x/y": "real/x/y", "a//b/./c": "a/b/c"} {
		got, err := subPath(vol, sub)
		realVol, _ := filepath.EvalSymlinks(vol)
		if err != nil || got != filepath.Join(realVol, want) {
			t.Errorf("%s: %q, %v; want %s", sub, got, err, want)
		}
	}
}

func TestVolumeMountsWithoutRootAreRefusedByName(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "kube-api-access-abcde", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}},
		{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}}}
	paths := map[string]string{"kube-api-access-abcde": t.TempDir(), "data": t.TempDir()}
	c := &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{
		{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
	}}
	if m, err := containerMounts(pod, c, paths, nil, nil, Runtime{}); err != nil || len(m) != 0 {
		t.Errorf("the default token volume without root: %v %v (want skipped)", m, err)
	}
	c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: "data", MountPath: "/data"})
	_, err := containerMounts(pod, c, paths, nil, nil, Runtime{})
	var ce containerspec.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `volume "data" cannot be mounted at /data`) {
		t.Errorf("got %v, want a config error naming the mount", err)
	}
}

func TestAPIDataVolumesAreMountedReadOnly(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}}}
	base := t.TempDir()
	paths := map[string]string{"cm": t.TempDir(), "scratch": t.TempDir()}
	c := &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{
		{Name: "cm", MountPath: filepath.Join(base, "cm")},
		{Name: "scratch", MountPath: filepath.Join(base, "scratch"), SubPathExpr: "$(POD)"},
	}}
	m, err := containerMounts(pod, c, paths, nil, map[string]string{"POD": "p1"}, Runtime{Mounts: true})
	if err != nil {
		t.Fatal(err)
	}
	if !m[0].ReadOnly || m[1].ReadOnly || m[1].HostPath != filepath.Join(paths["scratch"], "p1") {
		t.Errorf("mounts %+v", m)
	}
	if fi, err := os.Stat(filepath.Join(base, "cm")); err != nil || !fi.IsDir() {
		t.Errorf("mount point not prepared: %v", err)
	}
}

func TestHostPathTypes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	typ := func(t v1.HostPathType) *v1.HostPathType { return &t }
	for _, tc := range []struct {
		path string
		t    *v1.HostPathType
		ok   bool
	}{
		{dir, typ(v1.HostPathDirectory), true},
		{file, typ(v1.HostPathDirectory), false},
		{file, typ(v1.HostPathFile), true},
		{filepath.Join(dir, "new", "d"), typ(v1.HostPathDirectoryOrCreate), true},
		{filepath.Join(dir, "new2", "f"), typ(v1.HostPathFileOrCreate), true},
		{filepath.Join(dir, "absent"), typ(v1.HostPathFile), false},
		{filepath.Join(dir, "absent"), nil, true},
	} {
		err := checkHostPath(&v1.HostPathVolumeSource{Path: tc.path, Type: tc.t})
		if (err == nil) != tc.ok {
			t.Errorf("%s %v: %v", tc.path, tc.t, err)
		}
	}
}

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

// A tmpfs emptyDir is unmounted by path when the mount table read misses
// it (as a read racing other mounts can), so the pod directory goes.
func TestTeardownUnmountsAVolumeTheMountTableMissed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	pod := testPod("tmpfs")
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
	f := newFixture(t, pod)
	paths, err := f.vm.SetUp(context.Background(), pod, f.podDir)
	if err != nil {
		t.Fatal(err)
	}
	mounted := func() bool {
		for _, mp := range mounts.Points() {
			if mp == paths["scratch"] {
				return true
			}
		}
		return false
	}
	if !mounted() {
		t.Fatalf("no tmpfs at %s", paths["scratch"])
	}
	t.Cleanup(func() { unix.Unmount(paths["scratch"], unix.MNT_DETACH) })
	mountPoints = func() []string { return nil }
	t.Cleanup(func() { mountPoints = mounts.Points })
	f.vm.TearDown(f.podDir)
	if mounted() {
		t.Fatalf("%s is still mounted after teardown", paths["scratch"])
	}
	if err := os.RemoveAll(f.podDir); err != nil {
		t.Fatalf("pod directory not removable after teardown: %v", err)
	}
}

// A container with an image has a root filesystem of its own: a file from a
// volume (subPath into a configMap) may be mounted where the host happens
// to have a directory, and the agent makes no mount point on the host. The
// upstream Subpath conformance specs mount a directory and then a file at
// /test-volume; both must work. Host processes share the host's root, so
// there the host's path decides.
func TestMountPointsAreTheHostsOnlyForHostProcesses(t *testing.T) {
	vol := t.TempDir()
	if err := os.WriteFile(filepath.Join(vol, "configmap-file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
	}}}
	hostDir := t.TempDir() // a directory on the host where the container wants the file
	missing := filepath.Join(t.TempDir(), "not-on-the-host")
	c := &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{
		{Name: "cm", MountPath: hostDir, SubPath: "configmap-file"},
		{Name: "cm", MountPath: missing},
	}}
	paths := map[string]string{"cm": vol}
	m, err := containerMounts(pod, c, paths, nil, nil, Runtime{Mounts: true, Images: true})
	if err != nil || len(m) != 2 || m[0].HostPath != filepath.Join(vol, "configmap-file") || m[0].ContainerPath != hostDir {
		t.Fatalf("with images: %+v, %v; want the file mounted at %s", m, err, hostDir)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a mount point was made on the host for a container with its own root: %v", err)
	}
	_, err = containerMounts(pod, c, paths, nil, nil, Runtime{Mounts: true})
	var ce containerspec.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "exists and is not a file") {
		t.Errorf("host process: %v, want the host's directory refused as a file's mount point", err)
	}
}
