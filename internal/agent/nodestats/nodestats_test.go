package nodestats

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/podvisor/podvisor/internal/agent/eviction"
)

var update = flag.Bool("update", false, "rewrite testdata/ from the results")

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// input is a node with one pod: a running container burning CPU, an
// exited init container (not listed, its disk counted), an emptyDir, a
// CSI volume with its driver's figures (listed, not counted in the pod's
// ephemeral storage).
func input(now time.Time, cpu uint64) Input {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: types.UID("uid-1")},
		Status: v1.PodStatus{StartTime: &metav1.Time{Time: t0.Add(-time.Hour)}}}
	gone := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "default", UID: "uid-2"}}
	return Input{
		Now: now, NodeName: "node1", NodeStart: t0.Add(-24 * time.Hour),
		Node: eviction.NodeUsage{CPUUsageCoreNanoSeconds: 10 * cpu, CPUOK: true,
			MemoryWorkingSet: 3 << 30, MemoryUsage: 4 << 30, MemoryAvailable: 5 << 30, MemoryOK: true},
		Host: eviction.Observations{
			eviction.NodeFsAvailable: {Available: 60 << 30, Capacity: 100 << 30}, eviction.NodeFsInodesFree: {Available: 900, Capacity: 1000},
			eviction.ImageFsAvailable: {Available: 60 << 30, Capacity: 100 << 30}, eviction.ImageFsInodesFree: {Available: 900, Capacity: 1000},
			eviction.ContainerFsAvailable: {Available: 60 << 30, Capacity: 100 << 30}, eviction.ContainerFsInodes: {Available: 900, Capacity: 1000},
			eviction.PIDAvailable: {Available: 4000, Capacity: 4096},
		},
		Pods: []*v1.Pod{pod, gone},
		Volumes: map[types.UID][]statsapi.VolumeStats{pod.UID: {{Name: "data", PVCRef: &statsapi.PVCReference{Name: "data-web", Namespace: "default"},
			FsStats: statsapi.FsStats{Time: metav1.NewTime(now), CapacityBytes: ptr(uint64(1 << 30)), AvailableBytes: ptr(uint64(1<<30 - 8192)), UsedBytes: ptr(uint64(8192))}}}},
		Stats: func(p *v1.Pod) (eviction.PodStats, bool) {
			if p.UID != pod.UID {
				return eviction.PodStats{}, false
			}
			return eviction.PodStats{Processes: 3,
				Containers: []eviction.ContainerStats{
					{Name: "app", Running: true, StartedAt: t0.Add(-30 * time.Minute), CPUUsageCoreNanoSeconds: cpu,
						MemoryWorkingSet: 50 << 20, MemoryUsage: 60 << 20, MemoryRSS: 40 << 20,
						RootfsBytes: 4096, RootfsInodes: 4, LogsBytes: 1000, LogsInodes: 2},
					{Name: "init", StartedAt: t0.Add(-time.Hour), RootfsBytes: 8192, RootfsInodes: 1, LogsBytes: 10, LogsInodes: 1},
				},
				Volumes: []eviction.VolumeStats{{Name: "cache", Bytes: 1 << 20, Inodes: 10}},
			}, true
		},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (-want +got; -update rewrites):\n%s", name, d)
	}
}

// The summary in the kubelet's JSON: a second sample 10 s after the first
// gives the CPU rates (1.5 cores for the container, 15 for the node).
func TestSummaryFormat(t *testing.T) {
	first, prev := Build(input(t0, 100e9), nil)
	if first.Node.CPU.UsageNanoCores != nil || first.Pods[0].Containers[0].CPU.UsageNanoCores != nil {
		t.Errorf("a rate without a previous sample")
	}
	sum, _ := Build(input(t0.Add(10*time.Second), 115e9), prev)
	if got := *sum.Pods[0].Containers[0].CPU.UsageNanoCores; got != 1.5e9 {
		t.Errorf("container usageNanoCores = %d, want 1.5e9", got)
	}
	if got := *sum.Pods[0].EphemeralStorage.UsedBytes; got != 4096+1000+8192+10+1<<20 {
		t.Errorf("ephemeral storage %d, want rootfs + logs of both containers + the emptyDir", got)
	}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "summary.json", append(b, '\n'))

	// A restarted container's cumulative CPU starts over: no rate from the
	// old instance's sample.
	in := input(t0.Add(20*time.Second), 1e9)
	restarted := in.Stats
	in.Stats = func(p *v1.Pod) (eviction.PodStats, bool) {
		st, ok := restarted(p)
		if ok {
			st.Containers[0].StartedAt = t0.Add(15 * time.Second)
		}
		return st, ok
	}
	again, _ := Build(in, prev)
	if again.Pods[0].Containers[0].CPU.UsageNanoCores != nil {
		t.Errorf("rate across a restart: %d", *again.Pods[0].Containers[0].CPU.UsageNanoCores)
	}

	only, err := json.MarshalIndent(CPUAndMemory(sum), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "summary-cpu-memory.json", append(only, '\n'))
}

// /metrics/resource in the kubelet's Prometheus text.
func TestResourceMetricsFormat(t *testing.T) {
	sum, _ := Build(input(t0, 115e9), nil)
	for name, s := range map[string]statsapi.Summary{"resource-metrics.txt": sum, "resource-metrics-no-node.txt": {Node: statsapi.NodeStats{NodeName: "node1"}}} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(ResourceCollector{Summary: func(context.Context) statsapi.Summary { return s }})
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		golden(t, name, buf.Bytes())
	}
}

type fixedHost struct{ in Input }

func (h fixedHost) Usage() eviction.NodeUsage      { return h.in.Node }
func (h fixedHost) Observe() eviction.Observations { return h.in.Host }

// The full summary asks for the pods' volumes (CSI drivers' figures); the
// CPU-and-memory one, behind the resource metrics that metrics-server
// scrapes, never does.
func TestSourceAsksForVolumesOnlyForTheFullSummary(t *testing.T) {
	in := input(t0, 1e9)
	asked := 0
	src := &Source{NodeName: in.NodeName, Host: fixedHost{in}, Pods: func() []*v1.Pod { return in.Pods },
		Stats: func(context.Context, []*v1.Pod) eviction.StatsFunc { return in.Stats },
		Volumes: func(_ context.Context, p *v1.Pod) []statsapi.VolumeStats {
			asked++
			return in.Volumes[p.UID]
		}}
	if sum := src.CPUAndMemory(context.Background()); asked != 0 || len(sum.Pods) != 1 {
		t.Fatalf("CPUAndMemory asked for volumes %d times, %d pods", asked, len(sum.Pods))
	}
	sum := src.Summary(context.Background())
	if asked != len(in.Pods) {
		t.Fatalf("Summary asked for the volumes of %d pods, want %d", asked, len(in.Pods))
	}
	if vs := sum.Pods[0].VolumeStats; len(vs) != 2 || vs[1].Name != "data" || vs[1].PVCRef == nil {
		t.Fatalf("summary's volumes %+v: want the emptyDir, then the CSI volume with its claim", vs)
	}
}
