package shim

import (
	"context"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/process"
	"github.com/containerd/containerd/v2/pkg/namespaces"
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
// enough. A Create the client cancels can fail after `runc create` too.
type createCleaner struct {
	taskAPI.TTRPCTaskService
}

var _ taskAPI.TTRPCTaskService = createCleaner{}

// Create creates the task; when that fails and left a runc container that
// was not there before, the runc container is deleted (killed first).
func (c createCleaner) Create(ctx context.Context, r *taskAPI.CreateTaskRequest) (*taskAPI.CreateTaskResponse, error) {
	rc := runcFor(ctx, r)
	existed := false
	if rc != nil {
		_, err := rc.State(context.WithoutCancel(ctx), r.ID)
		existed = err == nil // someone else's: never deleted here
	}
	resp, err := c.TTRPCTaskService.Create(ctx, r)
	if err == nil || rc == nil || existed {
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

// runcFor is the runc the shim runs for r (its options' binary and root, the
// request's namespace), as the shim's newInit makes it; nil when r does not
// say (Create fails on that before it runs runc).
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
	return process.NewRunc(opts.Root, r.Bundle, ns, opts.BinaryName, opts.SystemdCgroup)
}
