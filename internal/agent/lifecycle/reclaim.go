package lifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// The final delete of a pod (grace 0, by the agent) takes the pod out of
// the API for good: whoever waits for it (a controller making the pod's
// replacement, a volume detach, a user's `kubectl delete --wait`) takes the
// node's resources for free from then on. As the kubelet's status manager
// deletes a pod only once podResourcesAreReclaimed holds
// (https://github.com/kubernetes/kubernetes/blob/v1.36.3/pkg/kubelet/kubelet_pods.go),
// the agent sends it only once the pod's termination is complete on the
// node: every container stopped, every sandbox stopped (StopPodSandbox
// returned: its processes are gone and its network is released) and none
// being made, and its CSI volumes unpublished and unstaged (the
// attach/detach controller detaches them once the pod is gone). The
// volumes that hold nothing outside the pod's directory are removed with
// it once the pod is gone from the API (podworker's finish).

// SandboxRecord is what the agent recorded of one of the pod's sandboxes.
type SandboxRecord struct {
	ID string
	// Stopped: this agent's StopPodSandbox for it returned. A sandbox the
	// runtime reports not ready (its pause process died, or it was stopped
	// by an earlier agent) still needs the stop: it may hold its network.
	Stopped bool
}

// Reclaim is what the agent knows of a pod's resources on the node.
type Reclaim struct {
	// Done is Plan.Done: terminal, and no container running, starting or
	// stopping.
	Done bool
	// Sandboxes are every sandbox the pod has on the node.
	Sandboxes []SandboxRecord
	// SandboxCreating: a sandbox is being made; it is not in Sandboxes yet.
	SandboxCreating bool
	// ProcessesLeft: processes still run in the pod's cgroup although its
	// containers and sandboxes are stopped — the runtime reports a
	// container stopped once its first process exits, while the kernel may
	// still be ending the rest of its PID namespace (seen under load), or a
	// process left its container. The kubelet's podResourcesAreReclaimed
	// waits for the pod cgroup to be gone for the same reason.
	ProcessesLeft bool
	// VolumesMounted: a CSI volume of the pod is still published or staged
	// (its driver's NodeUnpublishVolume/NodeUnstageVolume has not
	// succeeded yet).
	VolumesMounted bool
}

// Reclaimed: the pod's termination is complete on the node.
func (r Reclaim) Reclaimed() bool {
	return !r.ProcessesLeft && !r.VolumesMounted && r.stopped()
}

// stopped: every container and sandbox of the pod is stopped and none is
// being made; processes may still be left in its cgroup.
func (r Reclaim) stopped() bool {
	if !r.Done || r.SandboxCreating {
		return false
	}
	for _, sb := range r.Sandboxes {
		if !sb.Stopped {
			return false
		}
	}
	return true
}

// Stopped: every container and sandbox of the pod is stopped and none is
// being made (processes may still be left in its cgroup, volumes mounted).
func (r Reclaim) Stopped() bool { return r.stopped() }

// HoldTerminalPhase is the status the agent may write now: next, except that
// a pod the API does not show terminal yet is not moved to Succeeded or
// Failed until its containers and sandboxes are stopped (r.Stopped): it
// keeps the API's phase, reason and message until then. A terminal phase
// tells the API server, controllers and users that nothing of the pod runs:
// a Job counts it done, and the API server deletes a terminal pod at once
// on a graceful delete, which would take it out of the API while its
// sandbox still ran. The kubelet's status manager holds the phase the same
// way (mergePodStatus, "Delay transitioning a pod to a terminal status
// unless the pod is actually terminal",
// https://github.com/kubernetes/kubernetes/blob/v1.36.3/pkg/kubelet/status/status_manager.go).
func HoldTerminalPhase(api, next v1.PodStatus, r Reclaim) v1.PodStatus {
	if !isTerminal(next.Phase) || isTerminal(api.Phase) || r.stopped() {
		return next
	}
	next.Phase, next.Reason, next.Message = api.Phase, api.Reason, api.Message
	return next
}

// MayDelete says whether the agent may send the final delete of pod now: it
// is being deleted through the API and its resources are reclaimed.
func MayDelete(pod *v1.Pod, r Reclaim) bool {
	return pod.DeletionTimestamp != nil && r.Reclaimed()
}

// LeftProcessesGrace is how long processes may stay in the cgroup of a pod
// whose containers and sandboxes are all stopped before the agent kills
// them: the kernel ending a container's PID namespace takes a moment under
// load, and a process that outlives that escaped its container.
//
// What escapes: containerd's shim left a container's `runc init` behind
// when its task's creation failed after runc had made the container (the
// next start after a containerd restart that found the task created but
// not started, issue 25; podvisor's shim now deletes it, see
// internal/runtime/containerd/shim). Such a process waits for good: the pod's cgroup
// could never be removed and a pod being deleted would never be reclaimed.
// The kubelet likewise kills what is left in a pod's cgroup before removing
// it.
const LeftProcessesGrace = 5 * time.Second

// KillLeftProcesses says whether the processes left in the pod's cgroup are
// to be killed now: every container and sandbox of the pod is stopped, and
// processes have been left since leftSince (zero: not seen before) for
// LeftProcessesGrace. A finished pod that is not being deleted counts too:
// nothing of it may run.
func KillLeftProcesses(r Reclaim, leftSince, now time.Time) bool {
	return r.ProcessesLeft && r.stopped() && !leftSince.IsZero() && now.Sub(leftSince) >= LeftProcessesGrace
}
