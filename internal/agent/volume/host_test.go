package volume

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/host/mounts"
)

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
