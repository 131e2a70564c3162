// Package shim is containerd's runc shim v2 (containerd-shim-runc-v2), which
// podvisor builds as a binary of its own (./cmd/containerd-shim-runc-v2)
// rather than as a mode of podvisor: a shim per pod runs as long as the pod,
// so it should be small, and starting one should not initialise the whole
// control plane that podvisor's binary carries. It builds with CGO_ENABLED=0.
//
// It is containerd's shim but for one answer (see exitKeeper) and the
// clean-up of a failed create (see createCleaner): its task service is
// registered here rather than by containerd's task/plugin package.
package shim

import (
	"context"
	"os"

	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/manager"
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"

	"github.com/podvisor/podvisor/internal/runtime/containerd/keptexit"
)

// Main runs the shim with the process's arguments, as containerd starts it.
func Main() {
	shim.RunShim(context.Background(), manager.NewShimManager("io.containerd.runc.v2"))
}

// The registration of containerd's task/plugin package, with the task
// service wrapped.
func init() {
	registry.Register(&plugin.Registration{
		Type: plugins.TTRPCPlugin,
		ID:   "task",
		Requires: []plugin.Type{
			plugins.EventPlugin,
			plugins.InternalPlugin,
		},
		InitFn: func(ic *plugin.InitContext) (any, error) {
			pp, err := ic.GetByID(plugins.EventPlugin, "publisher")
			if err != nil {
				return nil, err
			}
			ss, err := ic.GetByID(plugins.InternalPlugin, "shutdown")
			if err != nil {
				return nil, err
			}
			s, err := task.NewTaskService(ic.Context, pp.(shim.Publisher), ss.(shutdown.Service))
			if err != nil {
				return nil, err
			}
			return exitKeeper{TTRPCTaskService: newCreateCleaner(s), keptExits: os.Getenv(keptexit.Env)}, nil
		},
	})
}
