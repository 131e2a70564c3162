package volume

import (
	"context"
	"os"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/golang/mock/gomock"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
)

func capsWith(types ...csi.NodeServiceCapability_RPC_Type) *csi.NodeGetCapabilitiesResponse {
	out := &csi.NodeGetCapabilitiesResponse{}
	for _, typ := range types {
		out.Capabilities = append(out.Capabilities, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: typ}}})
	}
	return out
}

// The summary API's entry of a published CSI volume comes from the
// driver's NodeGetVolumeStats on the published (and staging) path, named
// after the pod's volume with its claim; a driver without GET_VOLUME_STATS
// is not asked and its volume not listed.
func TestCSIVolumeStatsAskTheDriver(t *testing.T) {
	pod := claimPod("p")
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}, Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}
	f := newCSIFixture(t, true, []*v1.Pod{pod}, driverObj)
	ctx := context.Background()
	dir := f.podDir(pod)
	if got := f.vm.CSIVolumeStats(ctx, pod, dir); len(got) != 0 {
		t.Fatalf("stats of a pod with nothing published: %+v", got)
	}
	f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(stageCaps(), nil)
	f.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csi.NodeStageVolumeResponse{}, nil)
	f.node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
			return &csi.NodePublishVolumeResponse{}, os.Mkdir(r.TargetPath, 0o750)
		})
	if _, err := f.vm.SetUp(ctx, pod, dir); err != nil {
		t.Fatal(err)
	}

	// Without GET_VOLUME_STATS: not asked, not listed.
	f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(stageCaps(), nil)
	if got := f.vm.CSIVolumeStats(ctx, pod, dir); len(got) != 0 {
		t.Fatalf("stats of a driver without GET_VOLUME_STATS: %+v", got)
	}

	f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(
		capsWith(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_GET_VOLUME_STATS), nil)
	f.node.EXPECT().NodeGetVolumeStats(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
			if r.VolumeId != "h1" || r.VolumePath != noderequest.PublishPath(dir, "pv-1") || r.StagingTargetPath != noderequest.StagingPath(f.root, testDriver, "h1") {
				t.Errorf("NodeGetVolumeStats %v", r)
			}
			return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: 1 << 30, Available: 1<<30 - 4096, Used: 4096}}}, nil
		})
	got := f.vm.CSIVolumeStats(ctx, pod, dir)
	if len(got) != 1 {
		t.Fatalf("stats %+v, want the one volume", got)
	}
	vs := got[0]
	if vs.Name != "data" || vs.PVCRef == nil || vs.PVCRef.Name != "data" || vs.PVCRef.Namespace != "ns" {
		t.Errorf("entry %+v (pvcRef %+v): want volume data of claim ns/data", vs, vs.PVCRef)
	}
	if ptr.Deref(vs.UsedBytes, 0) != 4096 || ptr.Deref(vs.CapacityBytes, 0) != 1<<30 || vs.InodesUsed != nil {
		t.Errorf("figures %+v: want the driver's bytes and no inode figures", vs.FsStats)
	}

	// A driver that fails: left out.
	f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(capsWith(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS), nil)
	f.node.EXPECT().NodeGetVolumeStats(gomock.Any(), gomock.Any()).Return(nil, os.ErrPermission)
	if got := f.vm.CSIVolumeStats(ctx, pod, dir); len(got) != 0 {
		t.Fatalf("stats of a failing driver: %+v", got)
	}
}
