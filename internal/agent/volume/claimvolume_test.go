package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A claim that is not bound holds the pod back with the kubelet's
// FailedMount; once bound to a hostPath PV, the PV's directory is the
// volume, made by its DirectoryOrCreate type and mounted read-only when the
// pod's volume source says so.
func TestClaimVolumeWaitsForItsPVThenMountsIt(t *testing.T) {
	pod := testPod("claim")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c", ReadOnly: true}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data", SubPath: "sub"}}
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "claim-uid"}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending}}
	f := newFixture(t, pod, pvc)
	cs, rec := f.client, f.rec
	ctx := context.Background()

	_, err := f.vm.SetUp(ctx, pod, f.podDir)
	want := "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC ns/c: PVC is not bound"
	var me MountError
	if !errors.As(err, &me) || err.Error() != want {
		t.Fatalf("got %v, want a mount error %q", err, want)
	}
	if ev := <-rec.Events; ev != "Warning FailedMount "+want {
		t.Errorf("event %q", ev)
	}

	dir := filepath.Join(t.TempDir(), "pv-1")
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}, Spec: v1.PersistentVolumeSpec{
		PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr.To(v1.HostPathDirectoryOrCreate)}},
		ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "c", UID: "claim-uid"}}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc.Spec.VolumeName, pvc.Status.Phase = "pv-1", v1.ClaimBound
	if _, err := cs.CoreV1().PersistentVolumeClaims("ns").Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	paths, err := f.vm.SetUp(ctx, pod, f.podDir)
	if err != nil {
		t.Fatal(err)
	}
	if paths["data"] != dir {
		t.Errorf("volume at %s, want %s", paths["data"], dir)
	}
	mounts, err := containerMounts(pod, &pod.Spec.Containers[0], paths, nil, nil, Runtime{Mounts: true, Images: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 1 || mounts[0].HostPath != filepath.Join(dir, "sub") || !mounts[0].ReadOnly {
		t.Errorf("mounts = %+v, want %s/sub read-only", mounts, dir)
	}
}

// A writable local PV gets the pod's fsGroup when first set up for the pod
// (not at every container start); a hostPath PV never does, as upstream.
func TestLocalClaimVolumeGetsTheFSGroupOncePerPod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory another group")
	}
	const gid = 4321
	pod := testPod("fsgroup")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](gid)}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "local", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "l"}}},
		{Name: "host", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "h"}}},
	}
	localDir, hostDir := t.TempDir(), t.TempDir()
	objs := []k8sruntime.Object{}
	for _, c := range []struct {
		claim string
		src   v1.PersistentVolumeSource
	}{
		{"l", v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: localDir}}},
		{"h", v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir}}},
	} {
		objs = append(objs,
			&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: c.claim, UID: types.UID("uid-" + c.claim)},
				Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-" + c.claim}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}},
			&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + c.claim}, Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: c.src,
				ClaimRef: &v1.ObjectReference{Namespace: "ns", Name: c.claim, UID: types.UID("uid-" + c.claim)}}})
	}
	f := newFixture(t, pod, objs...)
	group := func(dir string) uint32 {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Gid
	}
	if _, err := f.vm.SetUp(context.Background(), pod, f.podDir); err != nil {
		t.Fatal(err)
	}
	if g := group(localDir); g != gid {
		t.Errorf("local PV group %d, want the fsGroup %d", g, gid)
	}
	if g := group(hostDir); g == gid {
		t.Errorf("hostPath PV got the fsGroup")
	}
	if err := os.Chown(localDir, -1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.vm.SetUp(context.Background(), pod, f.podDir); err != nil {
		t.Fatal(err)
	}
	if g := group(localDir); g != 0 {
		t.Errorf("the fsGroup was applied again at the next set-up (group %d)", g)
	}
}
