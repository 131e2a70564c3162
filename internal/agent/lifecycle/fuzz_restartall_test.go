package lifecycle

import (
	v1 "k8s.io/api/core/v1"
)

// FuzzCompute's part for the restart of all containers (KEP-5532): the
// rules it generates, the reset it carries out as the worker does, and the
// checks of the plans that restart all containers.

// fuzzRestartAllRules is one or two exit-code rules, the last with the
// RestartAllContainers action: a first rule with the Restart action can
// shadow it for the codes both match (the first matching rule wins), as can
// a Restart rule the container had already.
func fuzzRestartAllRules(r *fuzzBytes) []v1.ContainerRestartRule {
	rule := func(action v1.ContainerRestartRuleAction) v1.ContainerRestartRule {
		return v1.ContainerRestartRule{Action: action, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{
			Operator: pick(r, v1.ContainerRestartRuleOnExitCodesOpIn, v1.ContainerRestartRuleOnExitCodesOpNotIn),
			Values:   []int32{pick[int32](r, 0, 1, 42, 137)}}}
	}
	var rules []v1.ContainerRestartRule
	if r.intn(3) == 0 {
		rules = append(rules, rule(pick(r, v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleActionRestartAllContainers)))
	}
	return append(rules, rule(v1.ContainerRestartRuleActionRestartAllContainers))
}

// progressReset moves a reset in flight on, as the worker's resetContainer:
// a live instance is first stopped (no preStop, the minimum grace), then
// every instance is removed with what the worker knew of the container, so
// that the core sees it as never tried.
func (w *fuzzWorld) progressReset(name string) {
	if !w.resets[name] {
		return
	}
	r := w.s.Containers[name]
	if cur := r.Current; cur != nil && cur.State != StateExited {
		c := *cur
		c.State, c.ExitCode, c.Signal, c.FinishedAt = StateExited, 137, 9, w.s.Now
		r.Current = &c
		w.s.Containers[name] = r
		w.logf("reset of %s: stopped", name)
		return
	}
	delete(w.s.Containers, name)
	delete(w.s.Probes, name)
	delete(w.s.BackOff, name)
	delete(w.resets, name)
	w.logf("reset of %s: removed", name)
	for _, r := range w.s.Containers {
		if r.Current != nil || r.Starting || r.Stopping {
			return
		}
	}
	w.resetting, w.regular = false, false
	w.tried = map[string]bool{}
	w.logf("every container removed: the pod starts again")
}

// checkResets: a plan that restarts all containers (KEP-5532) does nothing
// else, follows an exit whose first matching rule asks for it (or a restart
// already published as under way), keeps the pod out of a terminal phase and
// publishes AllContainersRestarting True.
func (w *fuzzWorld) checkResets(in Snapshot, prev v1.PodStatus, p Plan, ending bool) {
	w.t.Helper()
	resets := 0
	for _, a := range p.Actions {
		if a.Kind == ActionReset {
			resets++
		}
	}
	if resets == 0 {
		return
	}
	if resets != len(p.Actions) {
		w.failf("resets mixed with other actions: %s", actionsString(p.Actions))
	}
	asked := false
	if c := conditionOf(prev.Conditions, v1.AllContainersRestarting); c != nil && c.Status == v1.ConditionTrue {
		asked = true
	}
	for _, c := range allContainers(in.Pod) {
		cur := in.Containers[c.Name].Current
		if cur != nil && cur.State == StateExited {
			if rule := fuzzMatchingRule(&c, cur.ExitCode); rule != nil && rule.Action == v1.ContainerRestartRuleActionRestartAllContainers {
				asked = true
			}
		}
	}
	if !asked {
		w.failf("reset with no exit asking for it: %s", actionsString(p.Actions))
	}
	if isTerminal(p.Status.Phase) {
		w.failf("phase %s while restarting all containers", p.Status.Phase)
	}
	if c := conditionOf(p.Status.Conditions, v1.AllContainersRestarting); c == nil || c.Status != v1.ConditionTrue {
		w.failf("restarting all containers with AllContainersRestarting %+v", c)
	}
}

// fuzzMatchingRule is c's first restart rule matching code (KEP-5307).
func fuzzMatchingRule(c *v1.Container, code int32) *v1.ContainerRestartRule {
	for i, r := range c.RestartPolicyRules {
		if e := r.ExitCodes; e != nil {
			in := false
			for _, v := range e.Values {
				in = in || v == code
			}
			if in == (e.Operator == v1.ContainerRestartRuleOnExitCodesOpIn) {
				return &c.RestartPolicyRules[i]
			}
		}
	}
	return nil
}
