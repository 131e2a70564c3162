package containerspec

import (
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Resources maps limits and requests to cgroup values as the
// kubelet does: memory limit as is, CPU limit as a CFS quota per 100 ms
// (at least 1 ms), CPU request as shares (2 when none, as for BestEffort).
func Resources(c *v1.Container) runtime.Resources {
	var r runtime.Resources
	if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
		r.MemoryLimitBytes = q.Value()
	}
	if q, ok := c.Resources.Limits[v1.ResourceCPU]; ok && !q.IsZero() {
		const period = 100000
		r.CPUPeriodMicros = period
		r.CPUQuotaMicros = max(q.MilliValue()*period/1000, 1000)
	}
	req := c.Resources.Requests[v1.ResourceCPU]
	r.CPUShares = uint64(min(max(req.MilliValue()*1024/1000, 2), 262144))
	return r
}
