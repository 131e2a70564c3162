package lifecycle

import (
	v1 "k8s.io/api/core/v1"
)

// phaseOf computes status.phase from the rendered container statuses
// (§2 rules 1–6, after upstream's getPhase). The statuses must come from
// containerStatus: there, a stopped container shows as waiting with a last
// state exactly when it will be restarted, and as terminated when it will
// not. Restart decisions thus already account for the pod and container
// restart policies (KEP-5307 included) and for termination, which makes the
// restartPolicy tests of getPhase become "is a restart pending".
func phaseOf(pod *v1.Pod, init, regular []v1.ContainerStatus) v1.PodPhase {
	byName := make(map[string]*v1.ContainerStatus, len(init))
	for i := range init {
		byName[init[i].Name] = &init[i]
	}
	pendingInit, failedInit := 0, 0
	running, waiting, stopped, succeeded, restarting := 0, 0, 0, 0, 0

	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		st, ok := byName[c.Name]
		if !ok {
			pendingInit++
			continue
		}
		last := st.LastTerminationState.Terminated
		if isSidecar(c) {
			// §2 rule 2: a sidecar is pending while running but not started or
			// before it ever ran; a terminated sidecar never decides the phase.
			switch {
			case st.State.Running != nil:
				if st.Started == nil || !*st.Started {
					pendingInit++
				}
				running++
			case st.State.Waiting != nil && last == nil:
				pendingInit++
				waiting++
			}
			continue
		}
		// §2 rule 1.
		switch {
		case st.State.Terminated != nil:
			if st.State.Terminated.ExitCode != 0 {
				failedInit++ // and it will not be restarted
			}
		case st.State.Waiting != nil && last != nil:
			// waiting to restart: failed, but not for good
		default:
			pendingInit++
		}
	}

	anyRegularStarted := false
	for i := range regular {
		st := &regular[i]
		anyRegularStarted = anyRegularStarted || hasStarted(st)
		switch {
		case st.State.Running != nil:
			running++
		case st.State.Terminated != nil:
			stopped++
			if st.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case st.LastTerminationState.Terminated != nil:
			stopped++
			restarting++
		default:
			waiting++
		}
	}

	switch {
	case failedInit > 0:
		// §2 rule 3: an init container failed and will not run again.
		return v1.PodFailed
	case pendingInit > 0 && !anyRegularStarted, waiting > 0:
		// §2 rule 4. The anyRegularStarted test keeps a pod whose sidecar
		// restarts after initialization from going back to Pending.
		return v1.PodPending
	case running > 0:
		return v1.PodRunning // §2 rule 5
	case stopped > 0:
		// §2 rule 6: everything stopped.
		switch {
		case restarting > 0:
			return v1.PodRunning
		case stopped == succeeded:
			return v1.PodSucceeded
		default:
			return v1.PodFailed
		}
	}
	return v1.PodPending
}

func isTerminal(p v1.PodPhase) bool { return p == v1.PodSucceeded || p == v1.PodFailed }
