package agent

import (
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/podsource"
	"github.com/podvisor/podvisor/internal/agent/podstartup"
	"github.com/podvisor/podvisor/internal/agent/podworker"
)

// watchedPods shows the pod start-up tracker every copy of a pod the
// watch delivers, as the kubelet's config source does, before the workers.
type watchedPods struct {
	podsource.Handler
	startup *podstartup.Tracker
}

func (w watchedPods) UpdatePod(pod *v1.Pod) {
	w.startup.ObservedPodOnWatch(pod)
	w.Handler.UpdatePod(pod)
}

func (w watchedPods) RemovePod(pod *v1.Pod) {
	w.startup.Forget(pod.UID)
	w.Handler.RemovePod(pod)
}

// startupStatuses tells the tracker each phase the agent sets.
type startupStatuses struct {
	podworker.StatusWriter
	startup *podstartup.Tracker
}

func (s startupStatuses) Set(pod *v1.Pod, status v1.PodStatus, deleteAfter bool) {
	s.startup.StatusSet(pod.UID, status.Phase)
	s.StatusWriter.Set(pod, status, deleteAfter)
}
