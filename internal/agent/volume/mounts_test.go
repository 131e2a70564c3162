package volume

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/volume/atomicwriter"
)

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

// A subPath into an atomic-writer volume (configMap, secret, downwardAPI,
// projected) names a file or directory of the payload: it resolves through
// the key's symlink and ..data to the current version's timestamped
// directory, and is mounted as what it is there (the upstream Subpath
// conformance specs "Atomic writer volumes"); after an update it resolves
// to the new version.
func TestSubPathResolvesInsideTheCurrentPayload(t *testing.T) {
	vol := filepath.Join(t.TempDir(), "cfg")
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	write := func(value string) {
		t.Helper()
		payload := map[string]atomicwriter.File{
			"configmap-key":           {Data: []byte(value)},
			"projected/configmap-key": {Data: []byte(value)},
			"downward/podname":        {Data: []byte("pod-" + value)},
		}
		if _, err := atomicwriter.Write(vol, payload, now); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
	}
	write("v1")
	for _, tc := range []struct {
		sub, want string
		dir       bool
	}{
		{sub: "configmap-key", want: "v1"},
		{sub: "projected/configmap-key", want: "v1"},
		{sub: "downward/podname", want: "pod-v1"},
		{sub: "projected", dir: true},
		{sub: "..data/configmap-key", want: "v1"},
	} {
		p, err := subPath(vol, tc.sub)
		if err != nil {
			t.Errorf("%s: %v", tc.sub, err)
			continue
		}
		data, _ := os.Readlink(filepath.Join(vol, "..data"))
		if real, _ := filepath.EvalSymlinks(vol); !strings.HasPrefix(p, filepath.Join(real, data)+"/") && p != filepath.Join(real, data) {
			t.Errorf("%s resolved to %s, outside the current version %s", tc.sub, p, data)
		}
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() != tc.dir {
			t.Errorf("%s: %v, directory %v; want directory %v", tc.sub, err, err == nil && fi.IsDir(), tc.dir)
			continue
		}
		if b, _ := os.ReadFile(p); !tc.dir && string(b) != tc.want {
			t.Errorf("%s = %q, want %q", tc.sub, b, tc.want)
		}
	}
	write("v2")
	if p, err := subPath(vol, "configmap-key"); err != nil {
		t.Error(err)
	} else if b, _ := os.ReadFile(p); string(b) != "v2" {
		t.Errorf("after the update the subPath reads %q, want v2", b)
	}
}
