package cri

import (
	"context"
	"fmt"

	"github.com/podvisor/podvisor/internal/runtime"
)

// ReopenContainerLog is CRI's ReopenContainerLog: containerd closes the
// container's log file and opens its log path again, so that after a rename
// new output goes to a new file.
func (r *Runtime) ReopenContainerLog(ctx context.Context, id string) error {
	if err := r.rs.ReopenContainerLog(quiet(ctx), id); err != nil {
		// containerd says "container is not running" without a code: the
		// contract's class comes from the container's state.
		if st, serr := r.Status(ctx, id); serr == nil && st.State != runtime.StateRunning {
			return fmt.Errorf("reopen log of container %s: it is %s, not running: %w", id, st.State, runtime.ErrConflict)
		}
		return classify(err, "reopen log of container %s", id)
	}
	return nil
}
