package probe

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/expansion"
)

// expandStatic expands $(VAR) in an exec probe's command against the
// container's env. Only literal values count: a valueFrom variable expands to
// the empty string, as upstream (ExpandContainerCommandOnlyStatic). $$ is a
// literal $; an undefined $(VAR) stays as written.
// A command that expands past the agent's limits is an error: the probe
// cannot run as written.
func expandStatic(cmd []string, envs []v1.EnvVar) ([]string, error) {
	vars := make(map[string]string, len(envs))
	for _, e := range envs {
		vars[e.Name] = e.Value
	}
	var budget expansion.Budget
	out := make([]string, len(cmd))
	for i, s := range cmd {
		v, err := budget.Expand(s, vars)
		if err != nil {
			return nil, fmt.Errorf("exec probe command: argument %d %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}
