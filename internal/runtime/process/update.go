package process

import (
	"context"
	"fmt"

	"github.com/podvisor/podvisor/internal/runtime"
)

// UpdateResources writes new limits into a running instance's cgroups and
// records them in its config.json, so that a created instance starts with
// them and a re-adopted one reports them. Without cgroups (not root, or
// NoCgroups) nothing is enforced, as at Create.
func (r *Runtime) UpdateResources(_ context.Context, id string, res runtime.Resources) error {
	d, err := r.dir(id)
	if err != nil {
		return err
	}
	cfg, err := d.readConfig()
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	st, err := d.readState()
	if err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	if st.state() == runtime.StateExited {
		return fmt.Errorf("update container %s: it exited: %w", id, runtime.ErrConflict)
	}
	merged := mergeResources(cfg.Spec.Resources, res)
	// The cgroups first: a limit the kernel refuses (memory below usage)
	// must not be recorded as the instance's.
	if err := (cgroupSet{Dirs: st.Cgroups}).applyLimits(merged); err != nil {
		return fmt.Errorf("update container %s: %w: %w", id, err, runtime.ErrConflict)
	}
	cfg.Spec.Resources = merged
	if err := writeJSON(d.path(configFile), cfg); err != nil {
		return fmt.Errorf("update container %s: %w", id, err)
	}
	r.log.Info("container resources updated", "pod", cfg.Spec.PodNamespace+"/"+cfg.Spec.PodName, "container", cfg.Spec.Name, "id", id,
		"memoryLimit", merged.MemoryLimitBytes, "cpuQuota", merged.CPUQuotaMicros, "cpuShares", merged.CPUShares)
	return nil
}

// mergeResources is old with every field next sets (a zero field keeps
// the old value: limits are never removed in place).
func mergeResources(old, next runtime.Resources) runtime.Resources {
	if next.MemoryLimitBytes != 0 {
		old.MemoryLimitBytes = next.MemoryLimitBytes
	}
	if next.CPUQuotaMicros != 0 {
		old.CPUQuotaMicros = next.CPUQuotaMicros
		old.CPUPeriodMicros = next.CPUPeriodMicros
	}
	if next.CPUShares != 0 {
		old.CPUShares = next.CPUShares
	}
	return old
}
