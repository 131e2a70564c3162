package noderequest

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const root = "/var/lib/podvisor/agent"

func TestStagingPathHashesTheHandle(t *testing.T) {
	// sha256sum of "vol-1", as the kubelet names the global mount directory.
	got := StagingPath(root, "hostpath.csi.k8s.io", "vol-1")
	want := root + "/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/" + "d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49" + "/globalmount"
	if got != want {
		t.Fatalf("StagingPath = %q, want %q", got, want)
	}
	if StagingPath(root, "d", "a/b") == StagingPath(root, "d", "a~b") {
		t.Fatal("different handles share a staging path")
	}
}

func TestPublishPathEscapesNames(t *testing.T) {
	got := PublishPath("/pods/ns_p_uid1", "pvc-1")
	if want := "/pods/ns_p_uid1/volumes/kubernetes.io~csi/pvc-1/mount"; got != want {
		t.Fatalf("PublishPath = %q, want %q", got, want)
	}
}

func TestAccessMode(t *testing.T) {
	multi := Capabilities{SingleNodeMultiWriter: true}
	for _, tc := range []struct {
		mode v1.PersistentVolumeAccessMode
		caps Capabilities
		want csi.VolumeCapability_AccessMode_Mode
	}{
		{v1.ReadWriteOnce, Capabilities{}, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{v1.ReadWriteOnce, multi, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
		{v1.ReadWriteOncePod, Capabilities{}, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{v1.ReadWriteOncePod, multi, csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
		{v1.ReadOnlyMany, Capabilities{}, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		{v1.ReadWriteMany, multi, csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		{"Bogus", Capabilities{}, csi.VolumeCapability_AccessMode_UNKNOWN},
	} {
		if got := AccessMode(tc.mode, tc.caps); got != tc.want {
			t.Errorf("AccessMode(%s, %+v) = %s, want %s", tc.mode, tc.caps, got, tc.want)
		}
	}
}

func pv(mut func(*v1.PersistentVolume)) *v1.PersistentVolume {
	p := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: v1.PersistentVolumeSpec{
			AccessModes:  []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod, v1.ReadWriteOnce},
			MountOptions: []string{"noatime"},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: "d.example.com", VolumeHandle: "h1", FSType: "ext4",
				VolumeAttributes:     map[string]string{"k": "v"},
				NodePublishSecretRef: &v1.SecretReference{Name: "s", Namespace: "ns"},
			}},
		},
	}
	if mut != nil {
		mut(p)
	}
	return p
}

func TestFromPV(t *testing.T) {
	block := v1.PersistentVolumeBlock
	for _, tc := range []struct {
		name    string
		pv      *v1.PersistentVolume
		podRO   bool
		wantErr bool
		check   func(Volume) bool
	}{
		{name: "first access mode is used", pv: pv(nil), check: func(v Volume) bool { return v.AccessMode == v1.ReadWriteOncePod }},
		{name: "no access modes means ReadWriteOnce", pv: pv(func(p *v1.PersistentVolume) { p.Spec.AccessModes = nil }),
			check: func(v Volume) bool { return v.AccessMode == v1.ReadWriteOnce }},
		{name: "pod readOnly", pv: pv(nil), podRO: true, check: func(v Volume) bool { return v.ReadOnly }},
		{name: "PV readOnly", pv: pv(func(p *v1.PersistentVolume) { p.Spec.CSI.ReadOnly = true }), check: func(v Volume) bool { return v.ReadOnly }},
		{name: "read-write", pv: pv(nil), check: func(v Volume) bool { return !v.ReadOnly }},
		{name: "block mode", pv: pv(func(p *v1.PersistentVolume) { p.Spec.VolumeMode = &block }), check: func(v Volume) bool { return v.Block }},
		{name: "not CSI", pv: pv(func(p *v1.PersistentVolume) { p.Spec.CSI = nil }), wantErr: true},
		{name: "no handle", pv: pv(func(p *v1.PersistentVolume) { p.Spec.CSI.VolumeHandle = "" }), wantErr: true},
		{name: "no driver", pv: pv(func(p *v1.PersistentVolume) { p.Spec.CSI.Driver = "" }), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := FromPV(tc.pv, tc.podRO)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.check != nil && !tc.check(v) {
				t.Fatalf("unexpected volume %+v", v)
			}
		})
	}
}

func TestStageRequest(t *testing.T) {
	v, _ := FromPV(pv(nil), false)
	if r := StageRequest(root, v, Capabilities{}, nil, nil, nil); r != nil {
		t.Fatalf("driver without STAGE_UNSTAGE got a stage request %v", r)
	}
	if r := UnstageRequest(root, v, Capabilities{}); r != nil {
		t.Fatalf("driver without STAGE_UNSTAGE got an unstage request %v", r)
	}
	gid := int64(2000)
	got := StageRequest(root, v, Capabilities{StageUnstage: true, VolumeMountGroup: true},
		map[string]string{"dev": "/dev/x"}, map[string]string{"pw": "1"}, &gid)
	want := &csi.NodeStageVolumeRequest{
		VolumeId:          "h1",
		PublishContext:    map[string]string{"dev": "/dev/x"},
		StagingTargetPath: StagingPath(root, "d.example.com", "h1"),
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
				FsType: "ext4", MountFlags: []string{"noatime"}, VolumeMountGroup: "2000"}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
		Secrets:       map[string]string{"pw": "1"},
		VolumeContext: map[string]string{"k": "v"},
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Fatalf("StageRequest (-want +got):\n%s", d)
	}
}

func TestPublishRequest(t *testing.T) {
	block := v1.PersistentVolumeBlock
	pod := Pod{Name: "p", Namespace: "ns", UID: "uid1", ServiceAccountName: "sa", Dir: "/pods/ns_p_uid1"}
	gid := int64(7)
	target := "/pods/ns_p_uid1/volumes/kubernetes.io~csi/pv-1/mount"
	mount := func(group string) *csi.VolumeCapability {
		return &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"noatime"}, VolumeMountGroup: group}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}
	}
	for _, tc := range []struct {
		name string
		pv   *v1.PersistentVolume
		caps Capabilities
		opts PublishOptions
		want *csi.NodePublishVolumeRequest
	}{
		{
			name: "no staging, no pod info: empty secrets map, no staging path",
			pv:   pv(nil),
			want: &csi.NodePublishVolumeRequest{VolumeId: "h1", TargetPath: target, VolumeCapability: mount(""),
				Secrets: map[string]string{}, VolumeContext: map[string]string{"k": "v"}},
		},
		{
			name: "staging driver gets the global mount as staging path; fsGroup only with VOLUME_MOUNT_GROUP",
			pv:   pv(nil),
			caps: Capabilities{StageUnstage: true},
			opts: PublishOptions{FSGroup: &gid, PublishContext: map[string]string{"a": "b"}, Secrets: map[string]string{"s": "t"}},
			want: &csi.NodePublishVolumeRequest{VolumeId: "h1", TargetPath: target, VolumeCapability: mount(""),
				StagingTargetPath: StagingPath(root, "d.example.com", "h1"), PublishContext: map[string]string{"a": "b"},
				Secrets: map[string]string{"s": "t"}, VolumeContext: map[string]string{"k": "v"}},
		},
		{
			name: "podInfoOnMount adds the pod's attributes; tokens go to the volume context",
			pv:   pv(nil),
			caps: Capabilities{VolumeMountGroup: true},
			opts: PublishOptions{PodInfoOnMount: true, FSGroup: &gid, TokenAttrs: map[string]string{"csi.storage.k8s.io/serviceAccount.tokens": "{}"}},
			want: &csi.NodePublishVolumeRequest{VolumeId: "h1", TargetPath: target, VolumeCapability: mount("7"),
				Secrets: map[string]string{},
				VolumeContext: map[string]string{"k": "v",
					"csi.storage.k8s.io/pod.name": "p", "csi.storage.k8s.io/pod.namespace": "ns", "csi.storage.k8s.io/pod.uid": "uid1",
					"csi.storage.k8s.io/serviceAccount.name": "sa", "csi.storage.k8s.io/ephemeral": "false",
					"csi.storage.k8s.io/serviceAccount.tokens": "{}"}},
		},
		{
			name: "tokens in secrets; read-only block volume",
			pv: pv(func(p *v1.PersistentVolume) {
				p.Spec.VolumeMode = &block
				p.Spec.CSI.ReadOnly = true
				p.Spec.CSI.VolumeAttributes = nil
			}),
			opts: PublishOptions{TokensInSecrets: true, TokenAttrs: map[string]string{"csi.storage.k8s.io/serviceAccount.tokens": "{}"}},
			want: &csi.NodePublishVolumeRequest{VolumeId: "h1", TargetPath: target, Readonly: true,
				VolumeCapability: &csi.VolumeCapability{
					AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
					AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
				},
				Secrets: map[string]string{"csi.storage.k8s.io/serviceAccount.tokens": "{}"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pv
			p.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
			v, err := FromPV(p, false)
			if err != nil {
				t.Fatal(err)
			}
			got := PublishRequest(root, v, pod, tc.caps, tc.opts)
			if d := cmp.Diff(tc.want, got, protocmp.Transform()); d != "" {
				t.Fatalf("PublishRequest (-want +got):\n%s", d)
			}
		})
	}
}

func TestPublishRequestDoesNotChangeThePVsAttributes(t *testing.T) {
	p := pv(nil)
	v, _ := FromPV(p, false)
	PublishRequest(root, v, Pod{Name: "p"}, Capabilities{}, PublishOptions{PodInfoOnMount: true})
	if len(p.Spec.CSI.VolumeAttributes) != 1 {
		t.Fatalf("PV's volume attributes were changed: %v", p.Spec.CSI.VolumeAttributes)
	}
}

func TestCapabilitiesFrom(t *testing.T) {
	rpc := func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	}
	got := CapabilitiesFrom(&csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		rpc(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME), rpc(csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP),
	}})
	if want := (Capabilities{StageUnstage: true, VolumeMountGroup: true}); got != want {
		t.Fatalf("CapabilitiesFrom = %+v, want %+v", got, want)
	}
	if got := CapabilitiesFrom(nil); got != (Capabilities{}) {
		t.Fatalf("CapabilitiesFrom(nil) = %+v", got)
	}
}

func TestFromInline(t *testing.T) {
	ro := true
	v := &v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: "d.example.com", ReadOnly: &ro, VolumeAttributes: map[string]string{"size": "1"},
		NodePublishSecretRef: &v1.LocalObjectReference{Name: "s"}}}}
	got, err := FromInline("uid1", "ns", v)
	if err != nil {
		t.Fatal(err)
	}
	if got.Handle != InlineHandle("uid1", "scratch") || got.Handle == InlineHandle("uid2", "scratch") || len(got.Handle) != len("csi-")+64 {
		t.Fatalf("handle %q is not per pod and volume", got.Handle)
	}
	if !got.ReadOnly || got.SpecName != "scratch" || got.AccessMode != v1.ReadWriteOnce ||
		got.PublishSecretRef == nil || got.PublishSecretRef.Namespace != "ns" || got.VolumeContext["size"] != "1" {
		t.Fatalf("FromInline = %+v", got)
	}
	req := PublishRequest(root, got, Pod{Name: "p", Namespace: "ns", UID: "uid1", Dir: "/pods/x"}, Capabilities{StageUnstage: true},
		PublishOptions{PodInfoOnMount: true, Ephemeral: true})
	if req.VolumeContext["csi.storage.k8s.io/ephemeral"] != "true" || req.TargetPath != "/pods/x/volumes/kubernetes.io~csi/scratch/mount" {
		t.Fatalf("publish request %v", req)
	}
	if _, err := FromInline("uid1", "ns", &v1.Volume{Name: "x", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{}}}); err == nil {
		t.Fatal("an inline volume without a driver was accepted")
	}
}

func TestVolumeStatsRequest(t *testing.T) {
	v, _ := FromPV(pv(nil), false)
	podDir := "/data/agent/pods/ns_p_uid"
	got := VolumeStatsRequest(root, v, podDir, true)
	want := &csi.NodeGetVolumeStatsRequest{VolumeId: "h1", VolumePath: PublishPath(podDir, v.SpecName), StagingTargetPath: StagingPath(root, "d.example.com", "h1")}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Fatalf("VolumeStatsRequest of a staged volume (-want +got):\n%s", d)
	}
	if got := VolumeStatsRequest(root, v, podDir, false); got.StagingTargetPath != "" {
		t.Fatalf("a volume that was not staged got staging path %q", got.StagingTargetPath)
	}
}

func TestExpandRequest(t *testing.T) {
	v, _ := FromPV(pv(func(p *v1.PersistentVolume) {
		p.Spec.CSI.NodeExpandSecretRef = &v1.SecretReference{Name: "e", Namespace: "ns"}
	}), false)
	if v.ExpandSecretRef == nil || v.ExpandSecretRef.Name != "e" {
		t.Fatalf("FromPV lost the expand secret: %+v", v.ExpandSecretRef)
	}
	podDir := "/data/agent/pods/ns_p_uid"
	got := ExpandRequest(root, v, podDir, true, Capabilities{SingleNodeMultiWriter: true, VolumeMountGroup: true}, 2<<30, map[string]string{"k": "s"})
	want := &csi.NodeExpandVolumeRequest{
		VolumeId: "h1", VolumePath: PublishPath(podDir, v.SpecName), StagingTargetPath: StagingPath(root, "d.example.com", "h1"),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30},
		VolumeCapability: &csi.VolumeCapability{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"noatime"}}},
		},
		Secrets: map[string]string{"k": "s"},
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Fatalf("ExpandRequest of a staged volume (-want +got):\n%s", d)
	}
	if got := ExpandRequest(root, v, podDir, false, Capabilities{}, 1, nil); got.StagingTargetPath != "" {
		t.Fatalf("a volume that was not staged got staging path %q", got.StagingTargetPath)
	}
	block := v1.PersistentVolumeBlock
	bv, _ := FromPV(pv(func(p *v1.PersistentVolume) { p.Spec.VolumeMode = &block }), false)
	if got := ExpandRequest(root, bv, podDir, false, Capabilities{}, 1, nil); got.GetVolumeCapability().GetBlock() == nil {
		t.Fatalf("a block volume's expand request asks for %v", got.GetVolumeCapability())
	}
}
