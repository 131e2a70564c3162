package probe

import (
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/expansion"
)

// expandStatic expands $(VAR) in an exec probe's command against the
// container's env. Only literal values count: a valueFrom variable expands to
// the empty string, as upstream (ExpandContainerCommandOnlyStatic). $$ is a
// literal $; an undefined $(VAR) stays as written.
func expandStatic(cmd []string, envs []v1.EnvVar) []string {
	vars := make(map[string]string, len(envs))
	for _, e := range envs {
		vars[e.Name] = e.Value
	}
	out := make([]string, len(cmd))
	for i, s := range cmd {
		out[i] = expansion.Expand(s, vars)
	}
	return out
}
