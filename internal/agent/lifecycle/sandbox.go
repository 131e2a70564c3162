package lifecycle

import v1 "k8s.io/api/core/v1"

// A pod's sandbox that dies (its pause process killed, the node rebooted)
// takes the pod's network with it. As the kubelet does (computePodActions in
// https://github.com/kubernetes/kubernetes/blob/v1.36.3/pkg/kubelet/kuberuntime/kuberuntime_manager.go):
//
//   - what still runs in the dead sandbox is stopped, with the pod's grace
//     period and its preStop hooks, sidecars last (planRun);
//   - then a new sandbox is made and the pod runs again from its first init
//     container: the init containers run again whatever their last exit (the
//     kubelet removes their instances), without back-off, their restart count
//     going on; regular containers restart by their restart policy (one that
//     succeeded in an OnFailure pod stays done) and back-off;
//   - a pod with restartPolicy Never that had containers gets no new
//     sandbox: it ends with the exits it has (sandboxLost);
//   - a pod whose regular containers are all done for good gets no new
//     sandbox either (regularDone);
//   - the event "SandboxChanged" says so, once per dead sandbox, when a new
//     one will be made.

// Event reason and message of a sandbox that will be re-created (upstream's).
const (
	EventSandboxChanged   = "SandboxChanged"
	MessageSandboxChanged = "Pod sandbox changed, it will be killed and re-created."
)

// stale: the newest instance ran in a sandbox that is gone.
func (c *container) stale() bool {
	return c.rec.Current != nil && c.rec.Current.OldSandbox
}

// rerun: an init container (sidecars included) whose newest instance ran in
// a sandbox that is gone: a new sandbox runs it again, as if for the first
// time.
func (c *container) rerun() bool { return c.init && c.stale() && c.exited() }

// initDone: the init container completed, or the sidecar started, in the
// pod's current sandbox.
func (c *container) initDone() bool {
	return !c.stale() && (c.completed() || (c.sidecar && c.started()))
}

// sandboxGoneForGood: the pod ran containers in a sandbox that is gone, and
// never restarts: it gets no new sandbox.
func (p *podState) sandboxGoneForGood() bool {
	if podRestartPolicy(p.pod) != v1.RestartPolicyNever {
		return false
	}
	for _, c := range p.containers {
		if c.stale() {
			return true
		}
	}
	return false
}

// sandboxChangedEvents is the SandboxChanged event when the pod's sandbox
// died and a new one will be made; the published PodReadyToStartContainers
// condition, True until this Compute turns it False, makes it one event
// however often Compute runs.
func (p *podState) sandboxChangedEvents() []Event {
	if p.s.SandboxReady || p.ending || p.resetPending {
		return nil
	}
	if c := conditionOf(p.pod.Status.Conditions, v1.PodReadyToStartContainers); c == nil || c.Status != v1.ConditionTrue {
		return nil
	}
	for _, c := range p.containers {
		if c.stale() {
			return []Event{{Type: v1.EventTypeNormal, Reason: EventSandboxChanged, Message: MessageSandboxChanged}}
		}
	}
	return nil
}
