package lifecycle

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// renderPlan prints one sync for a golden script: the plan's actions, what
// the fake runtime did with them, the events, the wake-up, then the status
// published with the plan.
func renderPlan(p Plan, runtime []string) string {
	var b strings.Builder
	if len(p.Actions) == 0 {
		b.WriteString("actions: none\n")
	}
	for _, a := range p.Actions {
		fmt.Fprintf(&b, "action: %s\n", renderAction(a))
	}
	for _, l := range runtime {
		fmt.Fprintf(&b, "runtime: %s\n", l)
	}
	for _, e := range p.Events {
		on := e.Container
		if on == "" {
			on = "pod"
		}
		fmt.Fprintf(&b, "event: %s %s %s: %s\n", e.Type, e.Reason, on, e.Message)
	}
	if !p.WakeAt.IsZero() {
		fmt.Fprintf(&b, "wake: +%s\n", rel(p.WakeAt))
	}
	if p.Done {
		b.WriteString("done\n")
	}
	st := p.Status
	fmt.Fprintf(&b, "phase: %s", st.Phase)
	if st.Reason != "" {
		fmt.Fprintf(&b, " reason=%s message=%q", st.Reason, st.Message)
	}
	b.WriteString("\n")
	for _, c := range st.Conditions {
		fmt.Fprintf(&b, "condition: %s=%s", c.Type, c.Status)
		if c.Reason != "" {
			fmt.Fprintf(&b, " %s", c.Reason)
		}
		if c.Message != "" {
			fmt.Fprintf(&b, " %q", c.Message)
		}
		b.WriteString("\n")
	}
	for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for _, c := range list {
			fmt.Fprintf(&b, "%s: %s\n", c.Name, renderContainer(c))
		}
	}
	return b.String()
}

func renderAction(a Action) string {
	switch a.Kind {
	case ActionStart:
		return fmt.Sprintf("start %s attempt=%d", a.Container, a.Attempt)
	case ActionKill:
		return fmt.Sprintf("kill %s grace=%s %q", a.Container, a.Grace, a.Message)
	case ActionReset:
		return "reset " + a.Container
	case ActionRunSandbox:
		return "run sandbox"
	case ActionResize:
		return "resize " + a.Container
	}
	return fmt.Sprintf("unknown(%d) %s", a.Kind, a.Container)
}

// renderContainer prints a container status on one line: its state with
// reason, exit code and message, restarts, started and ready, and the last
// termination.
func renderContainer(c v1.ContainerStatus) string {
	var b strings.Builder
	switch s := c.State; {
	case s.Waiting != nil:
		fmt.Fprintf(&b, "waiting %s", s.Waiting.Reason)
		if s.Waiting.Message != "" {
			fmt.Fprintf(&b, " %q", s.Waiting.Message)
		}
	case s.Running != nil:
		fmt.Fprintf(&b, "running since +%s", rel(s.Running.StartedAt.Time))
	case s.Terminated != nil:
		b.WriteString("terminated " + renderTerminated(s.Terminated))
	default:
		b.WriteString("no state")
	}
	fmt.Fprintf(&b, " restarts=%d", c.RestartCount)
	if c.Started != nil && *c.Started {
		b.WriteString(" started")
	}
	if c.Ready {
		b.WriteString(" ready")
	}
	if t := c.LastTerminationState.Terminated; t != nil {
		b.WriteString(" last=" + renderTerminated(t))
	}
	return b.String()
}

func renderTerminated(t *v1.ContainerStateTerminated) string {
	s := fmt.Sprintf("%s(%d)", t.Reason, t.ExitCode)
	if t.Message != "" {
		s += fmt.Sprintf(" %q", t.Message)
	}
	return s
}
