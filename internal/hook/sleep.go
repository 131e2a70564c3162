package hook

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

func (r *Runner) sleepHandler(pod *v1.Pod, c *v1.Container, a *v1.SleepAction) handler {
	return handler{
		run: func(ctx context.Context) result {
			if a.Seconds <= 0 {
				return result{}
			}
			t := r.clock.NewTimer(time.Duration(a.Seconds) * time.Second)
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
