package lifecycle

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// wantsRestart reports whether the restart policy asks to start c again
// after its newest instance exited with exitCode (§4, §11). It ignores
// whether the pod is terminating; the caller handles that.
func wantsRestart(pod *v1.Pod, c *container, exitCode int32) bool {
	if c.sidecar {
		return true // sidecars restart whatever the pod's policy (§11)
	}
	if c.regularInit() && exitCode == 0 {
		return false // a completed init container is never run again
	}
	policy := podRestartPolicy(pod)
	if c.spec.RestartPolicy != nil {
		// KEP-5307: the container's rules, then its own policy, win over the pod's.
		for _, r := range c.spec.RestartPolicyRules {
			if r.Action == v1.ContainerRestartRuleActionRestart && exitCodesMatch(r.ExitCodes, exitCode) {
				return true
			}
		}
		policy = v1.RestartPolicy(*c.spec.RestartPolicy)
	}
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

func podRestartPolicy(pod *v1.Pod) v1.RestartPolicy {
	if pod.Spec.RestartPolicy == "" {
		return v1.RestartPolicyAlways // the API default
	}
	return pod.Spec.RestartPolicy
}

func exitCodesMatch(m *v1.ContainerRestartRuleOnExitCodes, code int32) bool {
	if m == nil {
		return false
	}
	in := slices.Contains(m.Values, code)
	switch m.Operator {
	case v1.ContainerRestartRuleOnExitCodesOpIn:
		return in
	case v1.ContainerRestartRuleOnExitCodesOpNotIn:
		return !in
	}
	return false
}
