package cri

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// containerStatus maps a CRI container status. CRI does not say which
// signal killed a process (an exit code of 137 may be either), so Signal
// stays 0, as the kubelet's.
func containerStatus(s *runtimeapi.ContainerStatus) runtime.Status {
	ann := s.GetAnnotations()
	st := runtime.Status{
		ID:                     s.GetId(),
		SandboxID:              ann[annotationSandboxID],
		PodUID:                 s.GetLabels()[labelPodUID],
		PodNamespace:           s.GetLabels()[labelPodNamespace],
		PodName:                s.GetLabels()[labelPodName],
		Name:                   s.GetMetadata().GetName(),
		Attempt:                int32(s.GetMetadata().GetAttempt()),
		State:                  containerState(s.GetState()),
		CreatedAt:              fromNanos(s.GetCreatedAt()),
		StartedAt:              fromNanos(s.GetStartedAt()),
		FinishedAt:             fromNanos(s.GetFinishedAt()),
		LogPath:                s.GetLogPath(),
		TerminationMessageFile: ann[annotationTerminationFile],
		Labels:                 userLabels(s.GetLabels()),
		Image:                  s.GetImage().GetImage(),
		ImageRef:               s.GetImageRef(),
	}
	if st.State != runtime.StateExited {
		return st
	}
	if !st.StartedAt.IsZero() && st.FinishedAt.Before(st.StartedAt) {
		// containerd 2 takes the start time once the start returned and the
		// exit time from the process: a command that exits at once has
		// finished "before" it started. It started no later than it ended.
		st.StartedAt = st.FinishedAt
	}
	st.ExitCode = s.GetExitCode()
	st.Message = s.GetMessage()
	switch r := s.GetReason(); r {
	case "Completed", "Error":
		// What the exit code says already: the agent derives them.
	case "ContainerCannotRun":
		st.Reason = "StartError" // Docker's name for it
	default:
		st.Reason = r
	}
	if st.StartedAt.IsZero() && st.Reason == "" {
		// It never ran: whatever the runtime calls it, it could not start.
		st.Reason = "StartError"
	}
	if st.Reason == "StartError" && st.ExitCode == 0 {
		st.ExitCode = 128 // the contract's, containerd's and the kubelet's code for it
	}
	return st
}

func containerState(s runtimeapi.ContainerState) runtime.State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return runtime.StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return runtime.StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return runtime.StateExited
	}
	return runtime.StateUnknown
}
