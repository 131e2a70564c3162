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
	if c.regularInit() && exitCode == 0 && !restartsAll(c.spec, exitCode) {
		return false // a completed init container is never run again
	}
	policy := podRestartPolicy(pod)
	if c.spec.RestartPolicy != nil {
		// KEP-5307: the first matching rule, then the container's own policy,
		// win over the pod's. RestartAllContainers (KEP-5532) restarts it too,
		// with all the others.
		if r := matchingRule(c.spec, exitCode); r != nil &&
			(r.Action == v1.ContainerRestartRuleActionRestart || r.Action == v1.ContainerRestartRuleActionRestartAllContainers) {
			return true
		}
		policy = v1.RestartPolicy(*c.spec.RestartPolicy)
	}
	return policyRestarts(policy, exitCode)
}

// matchingRule is the first of c's restartPolicyRules matching exitCode
// (KEP-5307); nil when none does.
func matchingRule(c *v1.Container, exitCode int32) *v1.ContainerRestartRule {
	for i := range c.RestartPolicyRules {
		if exitCodesMatch(c.RestartPolicyRules[i].ExitCodes, exitCode) {
			return &c.RestartPolicyRules[i]
		}
	}
	return nil
}

// restartsAll: an exit of c with exitCode restarts all the pod's containers
// (KEP-5532).
func restartsAll(c *v1.Container, exitCode int32) bool {
	r := matchingRule(c, exitCode)
	return r != nil && r.Action == v1.ContainerRestartRuleActionRestartAllContainers
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

// MayLeaveTerminated reports whether the API accepts a status in which
// container c, terminated with exitCode, is no longer terminated: the API
// server refuses the transition unless the container could be restarted
// (its rules, its own policy, the pod's; any container of the pod with a
// RestartAllContainers rule allows it for all). Looser than wantsRestart:
// it is the API's rule, not the agent's decision.
func MayLeaveTerminated(spec *v1.PodSpec, c *v1.Container, exitCode int32) bool {
	if couldRestartAll(spec) {
		return true
	}
	policy := spec.RestartPolicy
	if c.RestartPolicy != nil {
		if r := matchingRule(c, exitCode); r != nil {
			return r.Action == v1.ContainerRestartRuleActionRestart
		}
		policy = v1.RestartPolicy(*c.RestartPolicy)
	}
	return policyRestarts(policy, exitCode)
}

// policyRestarts: a container under policy that exited with exitCode is
// started again (the API's default policy is Always).
func policyRestarts(policy v1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}
