package csivolume

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
)

func TestAttachmentNameIsTheControllers(t *testing.T) {
	// sha256 of "vol-1" + "hostpath.csi.k8s.io" + "node-1".
	got := AttachmentName("vol-1", "hostpath.csi.k8s.io", "node-1")
	if !strings.HasPrefix(got, "csi-") || len(got) != len("csi-")+64 {
		t.Fatalf("AttachmentName = %q", got)
	}
	if got == AttachmentName("vol-1", "hostpath.csi.k8s.io", "node-2") {
		t.Fatal("two nodes share an attachment name")
	}
}

func TestAttachRequiredAndPodInfo(t *testing.T) {
	for _, tc := range []struct {
		name           string
		d              *storagev1.CSIDriver
		attach, podInf bool
	}{
		{name: "no CSIDriver object: attach, no pod info", d: nil, attach: true},
		{name: "fields unset", d: &storagev1.CSIDriver{}, attach: true},
		{name: "attach not required, pod info", d: &storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(true)}}, podInf: true},
	} {
		if got := AttachRequired(tc.d); got != tc.attach {
			t.Errorf("%s: AttachRequired = %v", tc.name, got)
		}
		if got := PodInfoOnMount(tc.d); got != tc.podInf {
			t.Errorf("%s: PodInfoOnMount = %v", tc.name, got)
		}
	}
}

func TestFSGroup(t *testing.T) {
	gid := ptr.To[int64](2000)
	policy := func(p storagev1.FSGroupPolicy) *storagev1.CSIDriver {
		return &storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{FSGroupPolicy: &p}}
	}
	rwo := noderequest.Volume{FSType: "ext4", AccessMode: v1.ReadWriteOnce}
	for _, tc := range []struct {
		name     string
		d        *storagev1.CSIDriver
		v        noderequest.Volume
		caps     noderequest.Capabilities
		fsGroup  *int64
		toDriver bool
		byNode   bool
	}{
		{name: "no fsGroup", d: policy(storagev1.FileFSGroupPolicy), v: rwo},
		{name: "default policy, RWO with fsType: node", v: rwo, fsGroup: gid, byNode: true},
		{name: "default policy, no fsType: nothing", v: noderequest.Volume{AccessMode: v1.ReadWriteOnce}, fsGroup: gid},
		{name: "default policy, RWX: nothing", v: noderequest.Volume{FSType: "ext4", AccessMode: v1.ReadWriteMany}, fsGroup: gid},
		{name: "File: node, whatever the volume", d: policy(storagev1.FileFSGroupPolicy), v: noderequest.Volume{AccessMode: v1.ReadWriteMany}, fsGroup: gid, byNode: true},
		{name: "None: nothing", d: policy(storagev1.NoneFSGroupPolicy), v: rwo, fsGroup: gid},
		{name: "File with VOLUME_MOUNT_GROUP: the driver", d: policy(storagev1.FileFSGroupPolicy), v: rwo, fsGroup: gid,
			caps: noderequest.Capabilities{VolumeMountGroup: true}, toDriver: true},
		{name: "default policy with VOLUME_MOUNT_GROUP: neither", v: rwo, fsGroup: gid, caps: noderequest.Capabilities{VolumeMountGroup: true}},
		{name: "read-only: the node changes nothing", d: policy(storagev1.FileFSGroupPolicy), v: noderequest.Volume{ReadOnly: true}, fsGroup: gid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toDriver, byNode := FSGroup(tc.d, tc.v, tc.caps, tc.fsGroup)
			if (toDriver != nil) != tc.toDriver || byNode != tc.byNode {
				t.Fatalf("FSGroup = %v, %v; want to driver %v, by node %v", toDriver, byNode, tc.toDriver, tc.byNode)
			}
		})
	}
}

func TestAttached(t *testing.T) {
	va := func(mut func(*storagev1.VolumeAttachment)) *storagev1.VolumeAttachment {
		a := &storagev1.VolumeAttachment{Status: storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dev": "/dev/x"}}}
		if mut != nil {
			mut(a)
		}
		return a
	}
	md, err := Attached(va(nil), "csi-1")
	if err != nil || md["dev"] != "/dev/x" {
		t.Fatalf("attached: %v, %v", md, err)
	}
	for name, a := range map[string]*storagev1.VolumeAttachment{
		"not found":    nil,
		"not attached": va(func(a *storagev1.VolumeAttachment) { a.Status.Attached = false }),
		"attach error": va(func(a *storagev1.VolumeAttachment) {
			a.Status.Attached = false
			a.Status.AttachError = &storagev1.VolumeError{Message: "disk busy"}
		}),
		"being deleted": va(func(a *storagev1.VolumeAttachment) { a.DeletionTimestamp = &metav1.Time{} }),
	} {
		if _, err := Attached(a, "csi-1"); err == nil || !strings.Contains(err.Error(), "csi-1") {
			t.Errorf("%s: err = %v, want one naming the attachment", name, err)
		}
	}
}

func TestRecordRoundTripAndUnstage(t *testing.T) {
	r := Record{SpecVolID: "pv-1", VolumeHandle: "h", DriverName: "d", NodeName: "n", Staged: true}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || got != r {
		t.Fatalf("Decode(Encode(r)) = %+v, %v", got, err)
	}
	if _, err := Decode([]byte(`{"driverName":"d"}`)); err == nil {
		t.Fatal("a record without handle decoded")
	}
	if v := r.Volume(); v.Handle != "h" || v.Driver != "d" || v.SpecName != "pv-1" {
		t.Fatalf("Volume() = %+v", v)
	}
	other := Record{SpecVolID: "pv-1", VolumeHandle: "h", DriverName: "d"}
	if Unstage(r, []Record{other}) {
		t.Error("unstaged while another pod publishes the volume")
	}
	if !Unstage(r, []Record{{VolumeHandle: "h", DriverName: "other"}}) {
		t.Error("a volume of another driver with the same handle kept it staged")
	}
	if Unstage(Record{VolumeHandle: "h", DriverName: "d"}, nil) {
		t.Error("a volume that was never staged is unstaged")
	}
}

func TestEphemeralAllowed(t *testing.T) {
	modes := func(m ...storagev1.VolumeLifecycleMode) *storagev1.CSIDriver {
		return &storagev1.CSIDriver{Spec: storagev1.CSIDriverSpec{VolumeLifecycleModes: m}}
	}
	for _, tc := range []struct {
		name string
		d    *storagev1.CSIDriver
		want string // "" for allowed
	}{
		{"no CSIDriver object", nil, `volume mode "Ephemeral" not supported by driver d (no CSIDriver object)`},
		{"no modes: Persistent only", modes(), `volume mode "Ephemeral" not supported by driver d (only supports ["Persistent"])`},
		{"Persistent only", modes(storagev1.VolumeLifecyclePersistent), `only supports ["Persistent"]`},
		{"Ephemeral listed", modes(storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral), ""},
	} {
		err := EphemeralAllowed(tc.d, "d")
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}
