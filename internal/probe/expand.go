package probe

import (
	"strings"

	v1 "k8s.io/api/core/v1"
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
		out[i] = expand(s, vars)
	}
	return out
}

func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
