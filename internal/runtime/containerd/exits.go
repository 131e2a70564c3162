package containerd

import (
	"context"
	"time"

	eventtypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/pkg/protobuf"
	"github.com/containerd/typeurl/v2"

	"github.com/podvisor/podvisor/internal/runtime/containerd/keptexit"
)

// TaskExit is the exit of a container's main process, as the shim reports
// it to containerd.
type TaskExit struct {
	ContainerID string
	ExitStatus  uint32
	ExitedAt    time.Time
}

// exitsRetry is the pause before subscribing again after the event stream broke.
const exitsRetry = time.Second

// WatchTaskExits calls fn with every exit of a container's main process in
// the CRI's namespace, as soon as containerd hears of it from the shim,
// until ctx ends. containerd's CRI reports the same exit only after it has
// deleted the task through the shim (some 100-200 ms later on a busy
// node); a CRI runtime can use these to report exits sooner. Exits of exec
// processes are not passed on. A broken stream is subscribed again: exits
// missed meanwhile still come through the CRI.
func (p *Process) WatchTaskExits(ctx context.Context, fn func(TaskExit)) {
	for ctx.Err() == nil {
		p.watchTaskExitsOnce(ctx, fn)
		select {
		case <-ctx.Done():
		case <-time.After(exitsRetry):
		}
	}
}

func (p *Process) watchTaskExitsOnce(ctx context.Context, fn func(TaskExit)) {
	c, err := dial(ctx, p.paths.Socket, p.snapshotter)
	if err != nil {
		return
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	evs, errs := c.c.EventService().Subscribe(ctx, `topic=="/tasks/exit",namespace=="`+Namespace+`"`)
	for {
		select {
		case ev := <-evs:
			if ev == nil || ev.Event == nil {
				continue
			}
			v, err := typeurl.UnmarshalAny(ev.Event)
			if err != nil {
				continue
			}
			e, ok := v.(*eventtypes.TaskExit)
			if !ok || e.ID != e.ContainerID { // an exec process's exit
				continue
			}
			fn(TaskExit{ContainerID: e.ContainerID, ExitStatus: e.ExitStatus, ExitedAt: protobuf.FromTimestamp(e.ExitedAt)})
		case <-errs:
			return
		case <-ctx.Done():
			return
		}
	}
}

// ExitKept is the exit of container id that podvisor's shim kept when the
// container's task was deleted (package keptexit): the exit containerd's
// CRI reports lost (exit 255, reason Unknown) when containerd was killed
// after it deleted the task but before it recorded the exit. It is there
// until the CRI removes the container.
func (p *Process) ExitKept(id string) (TaskExit, bool) {
	e, ok := keptexit.Read(p.paths.KeptExits, id)
	if !ok {
		return TaskExit{}, false
	}
	return TaskExit{ContainerID: id, ExitStatus: e.Status, ExitedAt: e.At}, true
}
