package lifecycle

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Waiting and terminated reasons of container statuses (§3).
const (
	ReasonContainerCreating = "ContainerCreating"
	ReasonPodInitializing   = "PodInitializing"
	ReasonCrashLoopBackOff  = "CrashLoopBackOff"
	ReasonCompleted         = "Completed"
	ReasonError             = "Error"
	ReasonStatusUnknown     = "ContainerStatusUnknown"
)

// containerStatus renders the status of one container (§3).
func containerStatus(pod *v1.Pod, c *container, podRef string) v1.ContainerStatus {
	cur := c.rec.Current
	st := v1.ContainerStatus{
		Name:    c.name(),
		Image:   c.spec.Image,
		Ready:   c.ready(),
		Started: ptr.To(c.started()),
	}
	if cur != nil {
		st.ContainerID = cur.ID
		st.RestartCount = cur.Attempt
		if cur.Image != "" {
			// As upstream: the image the runtime reports for the newest
			// instance, which may name it differently from the spec.
			st.Image, st.ImageID = cur.Image, cur.ImageID
		}
	}
	if prev := c.rec.Previous; prev != nil && prev.State == StateExited {
		st.LastTerminationState = v1.ContainerState{Terminated: terminated(prev)}
	}

	// An exited instance about to be replaced shows as waiting with that
	// instance as the last state, as upstream does in back-off.
	replacing := c.exited() && (c.restart || c.rec.Starting)
	switch {
	case cur == nil || replacing:
		if replacing {
			st.LastTerminationState = v1.ContainerState{Terminated: terminated(cur)}
		}
		st.State = v1.ContainerState{Waiting: waiting(pod, c, podRef)}
	case cur.State == StateExited:
		st.State = v1.ContainerState{Terminated: terminated(cur)}
	case c.running():
		st.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: apiTime(cur.StartedAt)}}
	default: // created, postStart in flight, or unknown
		st.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: defaultWaitingReason(pod)}}
	}
	return st
}

func waiting(pod *v1.Pod, c *container, podRef string) *v1.ContainerStateWaiting {
	switch {
	case c.rec.Starting:
		return &v1.ContainerStateWaiting{Reason: defaultWaitingReason(pod)}
	case c.rec.Waiting != nil:
		w := *c.rec.Waiting
		if w.Reason == ReasonContainerCreating {
			// A volume not set up yet: upstream has no reason of its own for
			// it, the container keeps the default waiting state.
			w.Reason = defaultWaitingReason(pod)
		}
		return &w
	case c.restart && c.backOff:
		return &v1.ContainerStateWaiting{Reason: ReasonCrashLoopBackOff, Message: backOffMessage(c, podRef)}
	}
	return &v1.ContainerStateWaiting{Reason: defaultWaitingReason(pod)}
}

// defaultWaitingReason is what a container that has not started yet shows
// (§3), as upstream's default waiting state: in a pod with init containers
// every container — init containers included, the first one too — waits
// with PodInitializing, whether or not initialization is over; in a pod
// without, ContainerCreating.
func defaultWaitingReason(pod *v1.Pod) string {
	if len(pod.Spec.InitContainers) > 0 {
		return ReasonPodInitializing
	}
	return ReasonContainerCreating
}

// backOffMessage is upstream's, with the delay as Go prints it ("20s", "5m0s").
func backOffMessage(c *container, podRef string) string {
	return fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", c.delay, c.name(), podRef)
}

func terminated(in *Instance) *v1.ContainerStateTerminated {
	reason := in.Reason
	if reason == "" {
		reason = ReasonError
		if in.ExitCode == 0 {
			reason = ReasonCompleted
		}
	}
	return &v1.ContainerStateTerminated{
		ExitCode:    in.ExitCode,
		Signal:      in.Signal,
		Reason:      reason,
		Message:     in.Message,
		StartedAt:   apiTime(in.StartedAt),
		FinishedAt:  apiTime(in.FinishedAt),
		ContainerID: in.ID,
	}
}

// apiTime is t as the API will store it (whole seconds), so that a status
// read back compares equal to the one computed.
func apiTime(t time.Time) metav1.Time {
	if t.IsZero() {
		return metav1.Time{}
	}
	return metav1.NewTime(t.Truncate(time.Second))
}

// podRef names the pod as upstream's messages do: name_namespace(uid).
func podRef(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// hasStarted: the status shows the container ran at least once (upstream's
// HasAnyRegularContainerStarted looks at this).
func hasStarted(st *v1.ContainerStatus) bool {
	return st.State.Running != nil || st.State.Terminated != nil || st.LastTerminationState.Terminated != nil
}

// finalizeStatuses marks what the pod's end left unknown, as upstream's
// status manager does when a pod is terminated: once the pod has initialized,
// a regular container that is not terminated is reported terminated
// ContainerStatusUnknown (137); so is every init container up to the last
// one that showed signs of having run.
func finalizeStatuses(init, regular []v1.ContainerStatus) {
	unknown := func(st *v1.ContainerStatus) {
		if st.State.Terminated != nil {
			return
		}
		st.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
			Reason:   ReasonStatusUnknown,
			Message:  "The container could not be located when the pod was terminated",
			ExitCode: 137,
		}}
		st.Ready = false
		st.Started = ptr.To(false)
	}
	initialized := len(init) == 0 || init[len(init)-1].State.Terminated != nil && init[len(init)-1].State.Terminated.ExitCode == 0
	for i := range regular {
		initialized = initialized || hasStarted(&regular[i])
	}
	if initialized {
		for i := range regular {
			unknown(&regular[i])
		}
	}
	last := -1
	for i := range init {
		if init[i].State.Waiting == nil || init[i].LastTerminationState.Terminated != nil {
			last = i
		}
	}
	for i := 0; i <= last; i++ {
		unknown(&init[i])
	}
}
