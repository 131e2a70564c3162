package csivolume

import (
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

func TestFsStatsFromNodeGetVolumeStats(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	bytes := &csi.VolumeUsage{Unit: csi.VolumeUsage_BYTES, Total: 1000, Available: 600, Used: 400}
	inodes := &csi.VolumeUsage{Unit: csi.VolumeUsage_INODES, Total: 50, Available: 45, Used: 5}
	for _, tc := range []struct {
		name    string
		resp    *csi.NodeGetVolumeStatsResponse
		want    statsapi.FsStats
		wantErr bool
	}{
		{name: "bytes and inodes", resp: &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{bytes, inodes}},
			want: statsapi.FsStats{Time: now, CapacityBytes: ptr.To[uint64](1000), AvailableBytes: ptr.To[uint64](600), UsedBytes: ptr.To[uint64](400),
				Inodes: ptr.To[uint64](50), InodesFree: ptr.To[uint64](45), InodesUsed: ptr.To[uint64](5)}},
		{name: "bytes only: no inode figures", resp: &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{bytes}},
			want: statsapi.FsStats{Time: now, CapacityBytes: ptr.To[uint64](1000), AvailableBytes: ptr.To[uint64](600), UsedBytes: ptr.To[uint64](400)}},
		{name: "an unknown unit is skipped", resp: &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_UNKNOWN, Total: 7}, inodes}},
			want: statsapi.FsStats{Time: now, Inodes: ptr.To[uint64](50), InodesFree: ptr.To[uint64](45), InodesUsed: ptr.To[uint64](5)}},
		{name: "a negative figure is left out, not wrapped", resp: &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: 1000, Available: -1, Used: 400}}},
			want: statsapi.FsStats{Time: now, CapacityBytes: ptr.To[uint64](1000), UsedBytes: ptr.To[uint64](400)}},
		{name: "no usage: an error, as upstream", resp: &csi.NodeGetVolumeStatsResponse{}, wantErr: true},
		{name: "no response", resp: nil, wantErr: true},
	} {
		got, err := FsStats(tc.resp, now)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, want error %v", tc.name, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
			t.Errorf("%s: FsStats (-want +got):\n%s", tc.name, diff)
		}
	}
}
