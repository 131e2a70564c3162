package volume

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nfsClaimFixture is a pod with claim ns/c bound to an nfs PV (never
// mounted: the tests replace the client check and mount(8)).
func nfsClaimFixture(t *testing.T) (*fixture, *v1.Pod) {
	t.Helper()
	pod := testPod("nfs")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "claim-uid"},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-nfs"}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-nfs"}, Spec: v1.PersistentVolumeSpec{
		ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "c", UID: "claim-uid"},
		MountOptions:           []string{"nfsvers=4.1"},
		PersistentVolumeSource: v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "nfs.example", Path: "/exports/a"}}}}
	return newFixture(t, pod, pvc, pv), pod
}

func stubNFS(t *testing.T, client func() error, mount func(context.Context, []string) ([]byte, error)) {
	oldClient, oldMount := nfsClient, runMount
	nfsClient, runMount = client, mount
	t.Cleanup(func() { nfsClient, runMount = oldClient, oldMount })
}

// A node without the NFS client: FailedMount naming what is missing, the
// pod waits, mount(8) is never run.
func TestNFSVolumeWithoutTheClientNamesWhatIsMissing(t *testing.T) {
	f, pod := nfsClaimFixture(t)
	oldDirs := nfsHelperDirs
	nfsHelperDirs = []string{t.TempDir()}
	t.Cleanup(func() { nfsHelperDirs = oldDirs })
	t.Setenv("PATH", t.TempDir())
	stubNFS(t, nfsClient, func(context.Context, []string) ([]byte, error) {
		t.Error("mount(8) run without the NFS client")
		return nil, nil
	})
	_, err := f.vm.SetUp(context.Background(), pod, f.podDir)
	var me MountError
	if !errors.As(err, &me) {
		t.Fatalf("SetUp: %v, want a mount error", err)
	}
	want := `Warning FailedMount MountVolume.SetUp failed for volume "pv-nfs" : the NFS client is not installed on this node: mount.nfs not found in ` +
		nfsHelperDirs[0] + ` or PATH (Debian, Ubuntu: apt-get install nfs-common; Fedora, RHEL: dnf install nfs-utils)`
	if ev := <-f.rec.Events; ev != want {
		t.Fatalf("event %q\nwant  %q", ev, want)
	}
}

// With the client, mount(8) mounts server:export with the PV's options at
// the pod's nfs directory, which is the volume; its failure is the
// FailedMount with mount's output.
func TestNFSVolumeIsMountedByTheHostsClient(t *testing.T) {
	f, pod := nfsClaimFixture(t)
	var got []string
	fail := true
	stubNFS(t, func() error { return nil }, func(_ context.Context, args []string) ([]byte, error) {
		got = args
		if fail {
			return []byte("mount.nfs: Connection refused"), errors.New("exit status 32")
		}
		return nil, nil
	})
	if _, err := f.vm.SetUp(context.Background(), pod, f.podDir); err == nil {
		t.Fatal("SetUp succeeded while mount failed")
	}
	if ev := <-f.rec.Events; !strings.Contains(ev, `MountVolume.SetUp failed for volume "pv-nfs" : mount failed: exit status 32`) || !strings.Contains(ev, "Output: mount.nfs: Connection refused") {
		t.Fatalf("event %q", ev)
	}
	fail = false
	paths, err := f.vm.SetUp(context.Background(), pod, f.podDir)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(f.podDir, "volumes", "kubernetes.io~nfs", "pv-nfs")
	if paths["data"] != target {
		t.Errorf("volume at %q, want %q", paths["data"], target)
	}
	if want := "-t nfs -o nfsvers=4.1 nfs.example:/exports/a " + target; strings.Join(got, " ") != want {
		t.Errorf("mount %q, want %q", strings.Join(got, " "), want)
	}
}
