package csivolume

import (
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// FsStats reads a NodeGetVolumeStats response as the summary API's
// figures of a volume, as the kubelet's CSI metrics provider: the BYTES
// usage gives available, capacity and used bytes, the INODES usage the
// inode counts; other units are skipped; a response without usage is an error. Negative figures
// (a driver's bug) are left out rather than wrapped around.
func FsStats(resp *csi.NodeGetVolumeStatsResponse, now metav1.Time) (statsapi.FsStats, error) {
	if resp == nil || len(resp.GetUsage()) == 0 {
		return statsapi.FsStats{}, errors.New("NodeGetVolumeStats: the driver returned no usage")
	}
	fs := statsapi.FsStats{Time: now}
	for _, u := range resp.GetUsage() {
		switch u.GetUnit() {
		case csi.VolumeUsage_BYTES:
			fs.AvailableBytes, fs.CapacityBytes, fs.UsedBytes = count(u.GetAvailable()), count(u.GetTotal()), count(u.GetUsed())
		case csi.VolumeUsage_INODES:
			fs.InodesFree, fs.Inodes, fs.InodesUsed = count(u.GetAvailable()), count(u.GetTotal()), count(u.GetUsed())
		}
		// Other units are skipped, as upstream (which logs them).
	}
	return fs, nil
}

func count(n int64) *uint64 {
	if n < 0 {
		return nil
	}
	u := uint64(n)
	return &u
}
