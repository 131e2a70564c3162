package cri

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// UpdateResources is CRI's UpdateContainerResources, as a kubelet sends it
// for an in-place resize: the runtime writes the container's cgroups and
// keeps the values in its spec (a zero value leaves a limit as it is).
func (r *Runtime) UpdateResources(ctx context.Context, id string, res runtime.Resources) error {
	m, err := r.meta(ctx, id)
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	// containerd would update an exited container's spec all the same: the
	// contract is the same on every runtime, an exited one is a conflict.
	if st, err := r.Status(ctx, id); err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	} else if st.State == runtime.StateExited {
		return fmt.Errorf("update container %s (%s): it exited: %w", m.name, id, runtime.ErrConflict)
	}
	req := &runtimeapi.ContainerResources{Linux: linuxResources(res)}
	if err := r.rs.UpdateContainerResources(quiet(ctx), id, req); err != nil {
		return classify(err, "update resources of container %s (%s)", m.name, id)
	}
	r.log.Info("container resources updated", "container", m.name, "id", id,
		"memoryLimit", res.MemoryLimitBytes, "cpuQuota", res.CPUQuotaMicros, "cpuShares", res.CPUShares)
	return nil
}
