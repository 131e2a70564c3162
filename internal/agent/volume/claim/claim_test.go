package claim

import (
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestResolve(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0", UID: "pod-uid"}}
	claimVol := v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-web-0"}}}
	roVol := v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-web-0", ReadOnly: true}}}
	ephVol := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}
	bound := func(mut ...func(*v1.PersistentVolumeClaim)) *v1.PersistentVolumeClaim {
		c := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data-web-0", UID: "claim-uid"},
			Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-1"}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
		for _, m := range mut {
			m(c)
		}
		return c
	}
	affinity := func(node string) *v1.VolumeNodeAffinity {
		return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}
	}
	pv := func(src v1.PersistentVolumeSource, mut ...func(*v1.PersistentVolume)) *v1.PersistentVolume {
		p := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}, Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: src, ClaimRef: &v1.ObjectReference{Namespace: "ns", Name: "data-web-0", UID: "claim-uid"}}}
		for _, m := range mut {
			m(p)
		}
		return p
	}
	hostPath := v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/srv/pv-1", Type: ptr.To(v1.HostPathDirectoryOrCreate)}}
	local := v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt/disk"}}
	node := map[string]string{"kubernetes.io/hostname": "n1"}
	notFound := errors.New(`persistentvolumeclaims "data-web-0" not found`)

	for _, tc := range []struct {
		name       string
		vol        v1.Volume
		pvc        *v1.PersistentVolumeClaim
		pvcErr     error
		pv         *v1.PersistentVolume
		want       Mount
		wantErr    string
		processing bool
	}{
		{name: "hostPath PV", vol: claimVol, pvc: bound(), pv: pv(hostPath),
			want: Mount{PV: "pv-1", Kind: KindHostPath, Path: "/srv/pv-1", HostPathType: ptr.To(v1.HostPathDirectoryOrCreate)}},
		{name: "read-only claim", vol: roVol, pvc: bound(), pv: pv(hostPath),
			want: Mount{PV: "pv-1", Kind: KindHostPath, Path: "/srv/pv-1", ReadOnly: true, HostPathType: ptr.To(v1.HostPathDirectoryOrCreate)}},
		{name: "local PV on its node", vol: claimVol, pvc: bound(), pv: pv(local, func(p *v1.PersistentVolume) { p.Spec.NodeAffinity = affinity("n1") }),
			want: Mount{PV: "pv-1", Kind: KindLocal, Path: "/mnt/disk"}},
		{name: "local PV of another node", vol: claimVol, pvc: bound(), pv: pv(local, func(p *v1.PersistentVolume) { p.Spec.NodeAffinity = affinity("n2") }),
			wantErr: `MountVolume.NodeAffinity check failed for volume "pv-1" : no matching NodeSelectorTerms`},
		{name: "PVC missing", vol: claimVol, pvcErr: notFound, processing: true,
			wantErr: `error processing PVC ns/data-web-0: failed to fetch PVC from API server: persistentvolumeclaims "data-web-0" not found`},
		{name: "PVC pending", vol: claimVol, pvc: bound(func(c *v1.PersistentVolumeClaim) { c.Status.Phase = v1.ClaimPending; c.Spec.VolumeName = "" }),
			processing: true, wantErr: "error processing PVC ns/data-web-0: PVC is not bound"},
		{name: "PVC lost", vol: claimVol, pvc: bound(func(c *v1.PersistentVolumeClaim) { c.Status.Phase = v1.ClaimLost }),
			processing: true, wantErr: "error processing PVC ns/data-web-0: PVC is not bound"},
		{name: "PVC being deleted", vol: claimVol, pvc: bound(func(c *v1.PersistentVolumeClaim) { c.DeletionTimestamp = &metav1.Time{} }),
			processing: true, wantErr: "error processing PVC ns/data-web-0: PVC is being deleted"},
		{name: "PV missing", vol: claimVol, pvc: bound(), processing: true,
			wantErr: "error processing PVC ns/data-web-0: failed to fetch PV pv-1 from API server: <nil>"},
		{name: "PV bound to another claim", vol: claimVol, pvc: bound(), pv: pv(hostPath, func(p *v1.PersistentVolume) { p.Spec.ClaimRef.UID = "other" }),
			processing: true, wantErr: "found PV object pv-1 but its pv.Spec.ClaimRef.UID other does not point to claim.UID claim-uid"},
		{name: "PV not bound back", vol: claimVol, pvc: bound(), pv: pv(hostPath, func(p *v1.PersistentVolume) { p.Spec.ClaimRef = nil }),
			processing: true, wantErr: "it has a nil pv.Spec.ClaimRef"},
		{name: "nfs PV: the volume manager mounts it, read-only as the PV says", vol: claimVol, pvc: bound(),
			pv:   pv(v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/exports/a", ReadOnly: true}}, func(p *v1.PersistentVolume) { p.Spec.MountOptions = []string{"nfsvers=4.1"} }),
			want: Mount{PV: "pv-1", Kind: KindNFS, ReadOnly: true, NFSSource: "s:/exports/a", MountOptions: []string{"nfsvers=4.1"}}},
		{name: "nfs PV on an IPv6 server", vol: roVol, pvc: bound(), pv: pv(v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "fd00::5", Path: "/x"}}),
			want: Mount{PV: "pv-1", Kind: KindNFS, ReadOnly: true, NFSSource: "[fd00::5]:/x"}},
		{name: "PV of a type the node cannot mount", vol: claimVol, pvc: bound(), pv: pv(v1.PersistentVolumeSource{ISCSI: &v1.ISCSIPersistentVolumeSource{TargetPortal: "p", IQN: "i"}}),
			processing: true, wantErr: "PV pv-1 is of type iscsi, which this node cannot mount yet (supported: hostPath, local, csi, nfs)"},
		{name: "CSI PV: the volume manager publishes it", vol: roVol, pvc: bound(), pv: pv(v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}),
			want: Mount{PV: "pv-1", Kind: KindCSI, ReadOnly: true}},
		{name: "block mode", vol: claimVol, pvc: bound(), pv: pv(local, func(p *v1.PersistentVolume) { p.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock) }),
			wantErr: "volumeMode Block"},
		{name: "ephemeral volume owned by the pod", vol: ephVol,
			pvc: bound(func(c *v1.PersistentVolumeClaim) {
				c.Name = "web-0-scratch"
				c.OwnerReferences = []metav1.OwnerReference{{Kind: "Pod", Name: "web-0", UID: "pod-uid", Controller: ptr.To(true)}}
			}),
			pv:   pv(hostPath),
			want: Mount{PV: "pv-1", Kind: KindHostPath, Path: "/srv/pv-1", HostPathType: ptr.To(v1.HostPathDirectoryOrCreate)}},
		{name: "ephemeral volume's name taken by a PVC of another owner", vol: ephVol,
			pvc: bound(func(c *v1.PersistentVolumeClaim) { c.Name = "web-0-scratch" }), pv: pv(hostPath),
			processing: true, wantErr: "error processing PVC ns/web-0-scratch: PVC ns/web-0-scratch was not created for pod ns/web-0 (pod is not owner)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(pod, &tc.vol, tc.pvc, tc.pvcErr, tc.pv, nil, node)
			if tc.wantErr != "" {
				var ce *Error
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if !errors.As(err, &ce) || ce.ProcessingFailed != tc.processing {
					t.Fatalf("err %#v: ProcessingFailed should be %v", err, tc.processing)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.PV != tc.want.PV || got.Kind != tc.want.Kind || got.Path != tc.want.Path || got.ReadOnly != tc.want.ReadOnly ||
				(got.HostPathType == nil) != (tc.want.HostPathType == nil) || (got.HostPathType != nil && *got.HostPathType != *tc.want.HostPathType) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEvent(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&Error{ProcessingFailed: true, Msg: "error processing PVC ns/c: PVC is not bound"},
			"Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC ns/c: PVC is not bound"},
		{&Error{Msg: "MountVolume.NodeAffinity check failed"}, `MountVolume.SetUp failed for volume "data" : MountVolume.NodeAffinity check failed`},
	} {
		if got := Event("data", tc.err); got != tc.want {
			t.Errorf("Event = %q, want %q", got, tc.want)
		}
	}
}

func TestName(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: types.UID("u")}}
	for _, tc := range []struct {
		v        v1.Volume
		name     string
		readOnly bool
		ok       bool
	}{
		{v1.Volume{Name: "a", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c", ReadOnly: true}}}, "c", true, true},
		{v1.Volume{Name: "a", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}, "p-a", false, true},
		{v1.Volume{Name: "a", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}, "", false, false},
	} {
		name, ro, ok := Name(pod, &tc.v)
		if name != tc.name || ro != tc.readOnly || ok != tc.ok {
			t.Errorf("Name(%+v) = %q %v %v, want %q %v %v", tc.v.VolumeSource, name, ro, ok, tc.name, tc.readOnly, tc.ok)
		}
	}
}

func TestNFSMountArgs(t *testing.T) {
	for _, tc := range []struct {
		m    Mount
		want string
	}{
		{Mount{NFSSource: "s:/e"}, "-t nfs s:/e /t"},
		{Mount{NFSSource: "s:/e", ReadOnly: true, MountOptions: []string{"nfsvers=4.1", "hard"}}, "-t nfs -o ro,nfsvers=4.1,hard s:/e /t"},
		{Mount{NFSSource: "[fd00::5]:/e", MountOptions: []string{"soft"}}, "-t nfs -o soft [fd00::5]:/e /t"},
	} {
		if got := strings.Join(NFSMountArgs(tc.m, "/t"), " "); got != tc.want {
			t.Errorf("NFSMountArgs(%+v) = %q, want %q", tc.m, got, tc.want)
		}
	}
}
