package hook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

func (r *Runner) execHandler(pod *v1.Pod, c *v1.Container, containerID string, a *v1.ExecAction, budget time.Duration) handler {
	return handler{
		run: func(ctx context.Context) result {
			if r.exec == nil {
				return result{err: errors.New("exec hooks are not supported by this runtime")}
			}
			out, code, err := r.exec(ctx, containerID, a.Command, budget)
			if err == nil && code != 0 {
				// Upstream's CRI text; it carries stderr alone, we have the combined output.
				err = fmt.Errorf("command '%s' exited with %d: %s", strings.Join(a.Command, " "), code, out)
			}
			return result{output: out, err: err}
		},
		describe: func(res result) string {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				a.Command, c.Name, podDesc(pod), res.err, string(res.output))
		},
	}
}
