package node

import (
	"runtime"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/agent/eviction"
	"github.com/podvisor/podvisor/internal/cli/version"
)

var defaultHard, _ = eviction.ParseThresholds(eviction.DefaultHard, nil, nil, nil)

// Readiness says whether the agent can run pods; the shutdown manager turns it off.
type Readiness struct {
	Ready   bool
	Message string // why not ready
}

// StatusInput is everything the node status is computed from.
type StatusInput struct {
	Machine   Machine
	MaxPods   int32
	Readiness Readiness
	Now       metav1.Time
	// Pressure are the conditions the eviction manager found (it owns the
	// thresholds and the transition period).
	Pressure []v1.NodeConditionType
	// HardEviction is subtracted from capacity for allocatable, as the
	// kubelet's hard eviction thresholds of memory.available and
	// nodefs.available (upstream's defaults when unset).
	HardEviction []eviction.Threshold
}

// resources returns capacity and allocatable.
func resources(in StatusInput) (v1.ResourceList, v1.ResourceList) {
	m := in.Machine
	capacity := v1.ResourceList{
		v1.ResourceCPU:              *resource.NewQuantity(int64(m.CPUs), resource.DecimalSI),
		v1.ResourceMemory:           *resource.NewQuantity(m.MemoryTotal, resource.BinarySI),
		v1.ResourceEphemeralStorage: *resource.NewQuantity(m.DiskTotal, resource.BinarySI),
		v1.ResourcePods:             *resource.NewQuantity(int64(in.MaxPods), resource.DecimalSI),
	}
	allocatable := capacity.DeepCopy()
	hard := in.HardEviction
	if hard == nil {
		hard = defaultHard
	}
	allocatable[v1.ResourceMemory] = *resource.NewQuantity(max(0, m.MemoryTotal-eviction.HardReserve(hard, v1.ResourceMemory, m.MemoryTotal)), resource.BinarySI)
	allocatable[v1.ResourceEphemeralStorage] = *resource.NewQuantity(max(0, m.DiskTotal-eviction.HardReserve(hard, v1.ResourceEphemeralStorage, m.DiskTotal)), resource.BinarySI)
	return capacity, allocatable
}

// conditions returns the four node conditions the agent owns, in upstream order.
func conditions(in StatusInput) []v1.NodeCondition {
	has := func(t v1.NodeConditionType) bool { return slices.Contains(in.Pressure, t) }
	memPressure, diskPressure, pidPressure := has(v1.NodeMemoryPressure), has(v1.NodeDiskPressure), has(v1.NodePIDPressure)
	cond := func(t v1.NodeConditionType, pressure bool, okReason, okMsg, badReason, badMsg string) v1.NodeCondition {
		c := v1.NodeCondition{Type: t, Status: v1.ConditionFalse, Reason: okReason, Message: okMsg}
		if pressure {
			c.Status, c.Reason, c.Message = v1.ConditionTrue, badReason, badMsg
		}
		return c
	}
	ready := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}
	if !in.Readiness.Ready {
		ready.Status, ready.Reason, ready.Message = v1.ConditionFalse, "KubeletNotReady", in.Readiness.Message
	}
	return []v1.NodeCondition{
		cond(v1.NodeMemoryPressure, memPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available",
			"KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
		cond(v1.NodeDiskPressure, diskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure",
			"KubeletHasDiskPressure", "kubelet has disk pressure"),
		cond(v1.NodePIDPressure, pidPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available",
			"KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
		ready,
	}
}

// mergeConditions sets the agent's conditions on existing ones, keeping
// lastTransitionTime when the status did not change and conditions of others.
// It reports whether any condition's status, reason or message changed.
func mergeConditions(existing []v1.NodeCondition, fresh []v1.NodeCondition, now metav1.Time, heartbeat bool) ([]v1.NodeCondition, bool) {
	out := make([]v1.NodeCondition, 0, len(existing)+len(fresh))
	changed := false
	seen := map[v1.NodeConditionType]bool{}
	for _, f := range fresh {
		seen[f.Type] = true
		f.LastHeartbeatTime = now
		f.LastTransitionTime = now
		found := false
		for _, e := range existing {
			if e.Type != f.Type {
				continue
			}
			found = true
			if e.Status == f.Status {
				f.LastTransitionTime = e.LastTransitionTime
			}
			if e.Status != f.Status || e.Reason != f.Reason || e.Message != f.Message {
				changed = true
			} else if !heartbeat {
				f.LastHeartbeatTime = e.LastHeartbeatTime
			}
		}
		if !found {
			changed = true
		}
		out = append(out, f)
	}
	for _, e := range existing {
		if !seen[e.Type] {
			out = append(out, e)
		}
	}
	return out, changed
}

// nodeInfo is the static part of the node's status.
func nodeInfo(runtimeVersion string) v1.NodeSystemInfo {
	if runtimeVersion == "" {
		runtimeVersion = "podvisor-process://" + version.Version
	}
	return v1.NodeSystemInfo{
		MachineID:               readTrimmed("/etc/machine-id"),
		SystemUUID:              readTrimmed("/sys/class/dmi/id/product_uuid"),
		BootID:                  readTrimmed("/proc/sys/kernel/random/boot_id"),
		KernelVersion:           kernelVersion(),
		OSImage:                 osImage(),
		ContainerRuntimeVersion: runtimeVersion,
		KubeletVersion:          version.KubeletVersion(),
		OperatingSystem:         runtime.GOOS,
		Architecture:            runtime.GOARCH,
	}
}
