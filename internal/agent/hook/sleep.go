package hook

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
)

func (r *Runner) sleepHandler(pod *v1.Pod, c *v1.Container, a *v1.SleepAction) handler {
	return handler{
		run: func(ctx context.Context) result {
			if a.Seconds <= 0 {
				return result{}
			}
			// Saturates: sleep is bounded only by the grace period, itself unbounded.
			t := r.clock.NewTimer(lifecycle.Seconds(a.Seconds))
			defer t.Stop()
			select {
			case <-t.C():
				return result{}
			case <-ctx.Done():
				return result{err: errors.New("container terminated before sleep hook finished")}
			}
		},
		describe: func(res result) string {
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v",
				a.Seconds, c.Name, podDesc(pod), res.err)
		},
	}
}
