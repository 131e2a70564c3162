package volume

import (
	"context"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
	"github.com/podvisor/podvisor/internal/agent/volume/claim"
	"github.com/podvisor/podvisor/internal/agent/volume/csivolume"
)

// statsTimeout bounds the driver calls of one volume's stats: a scrape of
// the summary API must not hang on a driver in trouble.
const statsTimeout = 10 * time.Second

// CSIVolumeStats are the summary API's entries of the CSI volumes
// published into the pod whose directory is podDir, for the drivers that
// report usage (GET_VOLUME_STATS): NodeGetVolumeStats on each, with the
// claim of a persistent one (pvcRef), as the kubelet's CSI metrics. A
// volume whose driver is not registered, does not report usage or fails
// is left out (logged), as the kubelet leaves it out. Read from the
// records, so it holds across agent restarts.
func (vm *Manager) CSIVolumeStats(ctx context.Context, pod *v1.Pod, podDir string) []statsapi.VolumeStats {
	if vm.cfg.CSI == nil {
		return nil
	}
	recs, _ := records(podDir)
	claims := map[string]string{} // pod volume → its claim
	for i := range pod.Spec.Volumes {
		if name, _, ok := claim.Name(pod, &pod.Spec.Volumes[i]); ok {
			claims[pod.Spec.Volumes[i].Name] = name
		}
	}
	var out []statsapi.VolumeStats
	for _, r := range recs {
		if r.PodVolume == "" {
			continue
		}
		fs, ok := vm.csiUsage(ctx, podDir, r)
		if !ok {
			continue
		}
		vs := statsapi.VolumeStats{Name: r.PodVolume, FsStats: fs}
		if name, ok := claims[r.PodVolume]; ok {
			vs.PVCRef = &statsapi.PVCReference{Name: name, Namespace: pod.Namespace}
		}
		out = append(out, vs)
	}
	slices.SortFunc(out, func(a, b statsapi.VolumeStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// csiUsage asks r's driver for the usage of the volume, if it reports it.
func (vm *Manager) csiUsage(ctx context.Context, podDir string, r csivolume.Record) (statsapi.FsStats, bool) {
	_, client, ok := vm.cfg.CSI.Get(r.DriverName)
	if !ok {
		return statsapi.FsStats{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	caps, err := client.Capabilities(ctx)
	if err != nil || !caps.GetVolumeStats {
		return statsapi.FsStats{}, false
	}
	resp, err := client.VolumeStats(ctx, noderequest.VolumeStatsRequest(vm.cfg.CSIRoot, r.Volume(), podDir, r.Staged))
	if err != nil {
		vm.cfg.Log.Info("CSI volume stats not read", "dir", podDir, "volume", r.PodVolume, "driver", r.DriverName, "err", err)
		return statsapi.FsStats{}, false
	}
	fs, err := csivolume.FsStats(resp, metav1.NewTime(vm.cfg.Clock.Now()))
	if err != nil {
		vm.cfg.Log.Info("CSI volume stats not read", "dir", podDir, "volume", r.PodVolume, "driver", r.DriverName, "err", err)
		return statsapi.FsStats{}, false
	}
	return fs, true
}
