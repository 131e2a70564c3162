package shim

import (
	"context"
	"fmt"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"github.com/containerd/ttrpc"

	"github.com/podvisor/podvisor/internal/runtime/containerd/keptexit"
)

// exitKeeper keeps the exit status of a container that exits while
// containerd is down until containerd's CRI has read it.
//
// A restarted containerd loads every task's shim before its CRI recovers
// the containers, and deletes the task of any shim that is not a sandbox's
// and reports no processes, taking it for a shim leaked by a crash during
// create (containerd#6860; core/runtime/v2/shim_load.go, loadShim and
// shouldCleanupShim, v2.3.6). A container whose process exited while
// containerd was down has no processes either, so its task went, exit
// status and all, and the CRI, finding a running container without a task,
// reported exit code 255, reason Unknown (internal/cri/server/restart.go,
// loadContainer). Answering Pids for such a task with an error that is not
// NotFound makes containerd keep the shim ("failed to query shim pids,
// keeping shim registered"); the CRI then finds the task stopped, records
// its real exit status and time, and deletes it: the task is kept as it
// would have been had containerd been up when it exited, stopped until its
// owner deletes it. A shim with no task at all (the leak the check is for)
// still answers NotFound and is still cleaned.
//
// An exit containerd has heard of can still be lost: its CRI deletes the
// task, then records the exit, and containerd killed in between leaves the
// next one nothing to read. So the exit of a task's init process is kept
// on disk (package keptexit, in keptExits) before its task is deleted.
type exitKeeper struct {
	taskAPI.TTRPCTaskService
	keptExits string // keptexit's directory; "" keeps nothing on disk
}

var _ taskAPI.TTRPCTaskService = exitKeeper{}

// RegisterTTRPC registers the wrapper, not the service it wraps.
func (k exitKeeper) RegisterTTRPC(server *ttrpc.Server) error {
	taskAPI.RegisterTTRPCTaskService(server, k)
	return nil
}

// Pids answers as containerd's shim does, except for a task whose init
// process has exited and that has not been deleted: FailedPrecondition,
// where containerd's shim answers an empty list.
func (k exitKeeper) Pids(ctx context.Context, r *taskAPI.PidsRequest) (*taskAPI.PidsResponse, error) {
	resp, err := k.TTRPCTaskService.Pids(ctx, r)
	if err == nil && len(resp.GetProcesses()) > 0 {
		return resp, nil
	}
	st, serr := k.TTRPCTaskService.State(ctx, &taskAPI.StateRequest{ID: r.ID})
	if serr != nil || st.Status != task.Status_STOPPED {
		return resp, err
	}
	return nil, errgrpc.ToGRPC(fmt.Errorf("task %s exited with status %d and is not deleted yet: %w",
		r.ID, st.ExitStatus, errdefs.ErrFailedPrecondition))
}

// Delete keeps the exit of a task whose init process has exited before the
// task is deleted (an exec process's is not the container's).
func (k exitKeeper) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	if r.ExecID == "" && k.keptExits != "" {
		st, err := k.TTRPCTaskService.State(ctx, &taskAPI.StateRequest{ID: r.ID})
		if err == nil && st.Status == task.Status_STOPPED {
			e := keptexit.Exit{Status: st.ExitStatus, At: st.ExitedAt.AsTime()}
			if err := keptexit.Write(k.keptExits, r.ID, e); err != nil {
				// The shim's log is containerd's.
				log.G(ctx).WithError(err).WithField("id", r.ID).Warn("podvisor: keeping a container's exit")
			}
		}
	}
	return k.TTRPCTaskService.Delete(ctx, r)
}
