package shutdown

import (
	"math"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/config"
)

func testPod(name string, priority *int32, grace *int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name)},
		Spec:       v1.PodSpec{Priority: priority, TerminationGracePeriodSeconds: grace},
	}
}

// §10: the legacy pair becomes two bands (0: G-C, critical: C); the list form
// is sorted from the lowest priority; nothing set means off.
func TestBandsFromConfig(t *testing.T) {
	byPriority := func(p ...[2]int64) []kubeletv1beta1.ShutdownGracePeriodByPodPriority {
		var out []kubeletv1beta1.ShutdownGracePeriodByPodPriority
		for _, x := range p {
			out = append(out, kubeletv1beta1.ShutdownGracePeriodByPodPriority{Priority: int32(x[0]), ShutdownGracePeriodSeconds: x[1]})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		cfg  config.Config
		want []Band
	}{
		{"off", config.Config{}, nil},
		{"legacy 30s/10s", config.Config{ShutdownGracePeriod: 30 * time.Second, ShutdownGracePeriodCriticalPods: 10 * time.Second},
			[]Band{{0, 20 * time.Second}, {SystemCriticalPriority, 10 * time.Second}}},
		{"legacy without critical", config.Config{ShutdownGracePeriod: 20 * time.Second},
			[]Band{{0, 20 * time.Second}, {SystemCriticalPriority, 0}}},
		{"legacy all critical", config.Config{ShutdownGracePeriod: 10 * time.Second, ShutdownGracePeriodCriticalPods: 10 * time.Second},
			[]Band{{0, 0}, {SystemCriticalPriority, 10 * time.Second}}},
		{"legacy critical only is off", config.Config{ShutdownGracePeriodCriticalPods: 10 * time.Second}, nil},
		{"by priority, sorted", config.Config{ShutdownGracePeriodByPodPriority: byPriority([2]int64{100000, 10}, [2]int64{10000, 180}, [2]int64{1000, 120}, [2]int64{0, 60})},
			[]Band{{0, 60 * time.Second}, {1000, 120 * time.Second}, {10000, 180 * time.Second}, {100000, 10 * time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Bands(tc.cfg)
			if len(got) != len(tc.want) {
				t.Fatalf("Bands = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("Bands = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// §10: a pod belongs to the band with the highest priority ≤ its own; one
// below every band goes to the lowest; unset priority is 0.
func TestGroupsByPriority(t *testing.T) {
	bands := []Band{{1000, time.Second}, {10000, time.Second}, {100000, time.Second}, {SystemCriticalPriority, time.Second}}
	for _, tc := range []struct {
		priority *int32
		band     int32
	}{
		{nil, 1000}, // below every band: the lowest
		{ptr.To[int32](-5), 1000},
		{ptr.To[int32](1000), 1000}, // on a boundary: that band
		{ptr.To[int32](9999), 1000},
		{ptr.To[int32](10000), 10000},
		{ptr.To[int32](100001), 100000},
		{ptr.To[int32](2000000000), SystemCriticalPriority},
		{ptr.To[int32](2000001000), SystemCriticalPriority}, // system-node-critical
	} {
		pod := testPod("p", tc.priority, nil)
		groups := Groups(bands, []*v1.Pod{pod})
		if len(groups) != len(bands) {
			t.Fatalf("%d groups, want %d (empty ones included)", len(groups), len(bands))
		}
		for _, g := range groups {
			in := len(g.Pods) == 1
			if in != (g.Priority == tc.band) {
				t.Errorf("priority %v: in band %d = %v, want band %d", ptr.Deref(tc.priority, 0), g.Priority, in, tc.band)
			}
		}
	}
	if Groups(nil, []*v1.Pod{testPod("p", nil, nil)}) != nil {
		t.Error("no bands must give no groups")
	}
}

// §10: each pod's grace is the smaller of its band's period and its own.
func TestGrace(t *testing.T) {
	band := Band{Priority: 0, Period: 10 * time.Second}
	for _, tc := range []struct {
		own  *int64
		want time.Duration
	}{
		{nil, 10 * time.Second},
		{ptr.To[int64](120), 10 * time.Second},
		{ptr.To[int64](5), 5 * time.Second},
		{ptr.To[int64](10), 10 * time.Second},
		{ptr.To[int64](0), 0},
		// A grace beyond what a Duration holds used to wrap negative.
		{ptr.To[int64](math.MaxInt64), 10 * time.Second},
	} {
		if got := Grace(testPod("p", nil, tc.own), band); got != tc.want {
			t.Errorf("own %v: Grace = %v, want %v", tc.own, got, tc.want)
		}
	}
}
