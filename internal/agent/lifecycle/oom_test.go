package lifecycle

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The kubelet's QoS policy for oom_score_adj, case by case.
func TestOOMScoreAdj(t *testing.T) {
	const gi = int64(1) << 30
	for _, tc := range []struct {
		name     string
		pod      *v1.Pod
		c        string
		capacity int64
		want     int
	}{
		{"Guaranteed", newPod(containers("c"), withResources("c", small)), "c", 8 * gi, -997},
		{"BestEffort", newPod(containers("c")), "c", 8 * gi, 1000},
		{"Burstable: 1000 less the thousandths of memory requested", newPod(containers("c"), withResources("c", res("", "1Gi", "", ""))), "c", 8 * gi, 875},
		{"Burstable without a memory request: 999, below BestEffort", newPod(containers("c"), withResources("c", res("20m", "", "", ""))), "c", 8 * gi, 999},
		{"Burstable asking nearly all memory: 3, above Guaranteed", newPod(containers("c"), withResources("c", res("", "8Gi", "", "16Gi"))), "c", 8 * gi, 3},
		{"a sidecar no higher than the smallest regular container", newPod(sidecars("s"), containers("c"),
			withResources("s", res("", "", "", "")), withResources("c", res("", "2Gi", "", ""))), "s", 8 * gi, 750},
		{"node-critical", newPod(containers("c"), func(p *v1.Pod) {
			p.Spec.PriorityClassName, p.Spec.Priority = "system-node-critical", ptr.To[int32](2000001000)
		}), "c", 8 * gi, -997},
		{"no memory capacity known: the runtime's", newPod(containers("c"), withResources("c", res("", "1Gi", "", ""))), "c", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *v1.Container
			for _, list := range [][]v1.Container{tc.pod.Spec.InitContainers, tc.pod.Spec.Containers} {
				for i := range list {
					if list[i].Name == tc.c {
						c = &list[i]
					}
				}
			}
			if got := OOMScoreAdj(tc.pod, c, tc.capacity); got != tc.want {
				t.Errorf("OOMScoreAdj = %d, want %d", got, tc.want)
			}
		})
	}
}
