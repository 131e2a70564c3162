package cri

import (
	"context"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Usage reads the container's stats from the runtime (CRI ContainerStats).
// CRI counts no processes per container, so Processes stays 0.
func (r *Runtime) Usage(ctx context.Context, id string) (runtime.Usage, error) {
	s, err := r.rs.ContainerStats(quiet(ctx), id)
	if err != nil {
		return runtime.Usage{}, classify(err, "stats of container %s", id)
	}
	return runtime.Usage{
		MemoryWorkingSet:        int64(s.GetMemory().GetWorkingSetBytes().GetValue()),
		MemoryUsage:             int64(s.GetMemory().GetUsageBytes().GetValue()),
		MemoryRSS:               int64(s.GetMemory().GetRssBytes().GetValue()),
		CPUUsageCoreNanoSeconds: s.GetCpu().GetUsageCoreNanoSeconds().GetValue(),
		WritableBytes:           int64(s.GetWritableLayer().GetUsedBytes().GetValue()),
		WritableInodes:          int64(s.GetWritableLayer().GetInodesUsed().GetValue()),
	}, nil
}
