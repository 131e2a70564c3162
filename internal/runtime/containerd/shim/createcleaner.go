package shim

import (
	"context"
	"fmt"
	"os"
	"sync"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/process"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	runc "github.com/containerd/go-runc"
	"github.com/containerd/log"
	"github.com/containerd/typeurl/v2"
)

// createCleaner deletes the runc container a failed Create leaves behind.
//
// containerd's shim creates a task in two steps: `runc create` (the
// container's cgroup and its init process, `runc init`, waiting for the
// start), then the set-up of its stdio. When the second step fails, Create
// returns the error but nothing deletes the runc container
// (cmd/containerd-shim-runc-v2/runc/container.go NewContainer and
// process/init.go Create, v2.3.6): the shim never registered the task, so
// containerd's clean-up (a task Delete) answers NotFound and the shim of
// the sandbox lives on. The `runc init` waits in the container's cgroup for
// good, past the container's removal and the pod's: the pod cgroup can no
// longer be removed, and a pod that is not terminal can never be reclaimed.
//
// The stdio set-up fails for certain after a containerd restart that found
// the task created but not started (killed between the CRI's NewTask and
// Start): the CRI deletes that task, and with it the FIFOs its container's
// IO still names, so the next StartContainer's Create cannot open them
// (internal/cri/server/restart.go loadContainer, v2.3.6). podvisor's
// containerd dies with podvisor, so a crash during a container's start is
// enough.
//
// It also finishes a Create whose client gave up, and deletes its task. A
// client that gives up on a start (the CRI's StartContainer cancelled, or
// timed out) gives up on the shim's Create: containerd cleans up at once
// with a Delete, which containerd's shim answers NotFound (the task is
// registered only when Create returns), then closes its connection to the
// shim, which cancels the Create: `runc create` is killed midway, and the
// runc init it forked waits for good, known to nobody (seen with a
// StartContainer cancelled 24 ms in: "failed to delete task … container not
// created: not found", "failed to create shim task: context canceled").
// Here Create runs to its end, a Delete that came meanwhile waits for it
// (as long as its caller waits), and the task is deleted as soon as its
// Create returns.
type createCleaner struct {
	taskAPI.TTRPCTaskService
	creating *creates
}

// newCreateCleaner wraps s.
func newCreateCleaner(s taskAPI.TTRPCTaskService) createCleaner {
	return createCleaner{TTRPCTaskService: s, creating: &creates{byID: map[string]*create{}}}
}

// creates are the Creates under way, by task ID.
type creates struct {
	mu   sync.Mutex
	byID map[string]*create
}

// create is one Create under way.
type create struct {
	done        chan struct{} // closed when the Create has returned
	deleteAsked bool          // under creates.mu
	// The Delete made when the Create returned; set before done is closed.
	deleted bool
	resp    *taskAPI.DeleteResponse
	err     error
}

func (c *creates) begin(id string) *create {
	cr := &create{done: make(chan struct{})}
	c.mu.Lock()
	c.byID[id] = cr
	c.mu.Unlock()
	return cr
}

// end ends cr (its deletion, if any, made).
func (c *creates) end(id string, cr *create) {
	c.mu.Lock()
	if c.byID[id] == cr {
		delete(c.byID, id)
	}
	c.mu.Unlock()
	close(cr.done)
}

// askDelete marks the Create of id under way, if there is one, to be
// deleted when it returns, and returns it.
func (c *creates) askDelete(id string) *create {
	c.mu.Lock()
	defer c.mu.Unlock()
	cr := c.byID[id]
	if cr != nil {
		cr.deleteAsked = true
	}
	return cr
}

func (c *creates) deleteAsked(cr *create) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cr.deleteAsked
}

// Create creates the task; when that fails and left a runc container, the
// runc container is deleted (killed first). A task this shim already has is
// never touched. (containerd creates a task only where it has none: its
// bundle directory is new. A runc container of that ID was leaked, or made
// by this create.)
func (c createCleaner) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*taskAPI.CreateTaskResponse, error) {
	rc := runcFor(ctx, r)
	_, serr := c.TTRPCTaskService.State(ctx, &taskAPI.StateRequest{ID: r.ID})
	existed := serr == nil
	cr := c.creating.begin(r.ID)
	// Not cancelled with its caller: containerd's clean-up after a client
	// gave up closes its connection to the shim, which cancels ctx, and
	// a `runc create` killed midway leaves its runc init behind with no
	// runc state to find it by. Finished, the task is deleted (the
	// clean-up's Delete waits for it, or marked it).
	resp, err := c.TTRPCTaskService.Create(context.WithoutCancel(ctx), r)
	if err == nil && c.creating.deleteAsked(cr) {
		cr.resp, cr.err = c.deleteCreated(context.WithoutCancel(ctx), r, rc)
		cr.deleted = true
		resp, err = nil, errgrpc.ToGRPC(fmt.Errorf("task %s was deleted during its create: %w", r.ID, errdefs.ErrNotFound))
	}
	c.creating.end(r.ID, cr)
	if err == nil || cr.deleted || rc == nil || existed {
		return resp, err
	}
	// The clean-up must happen even when the client has gone away.
	cctx := context.WithoutCancel(ctx)
	if _, serr := rc.State(cctx, r.ID); serr != nil {
		return resp, err // runc made nothing
	}
	// The shim's log is containerd's (the shim's log pipe).
	l := log.G(ctx).WithField("id", r.ID).WithField("createErr", err.Error())
	if derr := rc.Delete(cctx, r.ID, &runc.DeleteOpts{Force: true}); derr != nil {
		l.WithError(derr).Error("podvisor: deleting the runc container of a failed create")
	} else {
		l.Warn("podvisor: deleted the runc container of a failed create")
	}
	return resp, err
}

// deleteCreated deletes the task r created, whose Delete came during the
// create. containerd removed its bundle directory meanwhile, where runc is
// told to write its log: without it every runc command fails, so an empty
// one stands in while the task is deleted. If the deletion fails all the
// same, the runc container is deleted (killed first) so that nothing of it
// runs.
func (c createCleaner) deleteCreated(ctx context.Context, r *taskAPI.CreateTaskRequest, rc *runc.Runc) (*taskAPI.DeleteResponse, error) {
	l := log.G(ctx).WithField("id", r.ID)
	if err := os.Mkdir(r.Bundle, 0o700); err == nil {
		defer os.RemoveAll(r.Bundle)
	}
	resp, err := c.TTRPCTaskService.Delete(ctx, &taskAPI.DeleteRequest{ID: r.ID})
	if err == nil {
		l.Warn("podvisor: deleted a task whose Delete came during its create")
		return resp, nil
	}
	if rc != nil {
		if derr := rc.Delete(ctx, r.ID, &runc.DeleteOpts{Force: true}); derr != nil {
			l.WithError(err).WithField("runcErr", derr.Error()).Error("podvisor: deleting a task whose Delete came during its create")
			return nil, err
		}
	}
	l.WithError(err).Warn("podvisor: deleted the runc container of a task whose Delete came during its create")
	return nil, err
}

// Delete deletes the task, or a process of it, once no Create of the task
// is under way.
func (c createCleaner) Delete(ctx context.Context, r *taskAPI.DeleteRequest) (*taskAPI.DeleteResponse, error) {
	if r.ExecID == "" {
		if cr := c.creating.askDelete(r.ID); cr != nil {
			select {
			case <-cr.done:
				if cr.deleted {
					return cr.resp, cr.err
				}
			case <-ctx.Done():
				// The Create deletes the task when it returns.
			}
		}
	}
	return c.TTRPCTaskService.Delete(ctx, r)
}

// runcFor is the runc the shim runs for r (its options' binary and root, the
// request's namespace), as the shim's newInit makes it, for clean-ups; nil
// when r does not say (Create fails on that before it runs runc).
func runcFor(ctx context.Context, r *taskAPI.CreateTaskRequest) *runc.Runc {
	ns, err := namespaces.NamespaceRequired(ctx)
	if err != nil {
		return nil
	}
	opts := &options.Options{}
	if r.Options.GetValue() != nil {
		v, err := typeurl.UnmarshalAny(r.Options)
		if err != nil {
			return nil
		}
		o, ok := v.(*options.Options)
		if !ok {
			return nil
		}
		opts = o
	}
	rc := process.NewRunc(opts.Root, r.Bundle, ns, opts.BinaryName, opts.SystemdCgroup)
	// Its log goes to the shim's stderr, not into the bundle, which may be
	// gone by the time it cleans up.
	rc.Log = ""
	return rc
}
