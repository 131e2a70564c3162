// Package shim is containerd's runc shim v2 (containerd-shim-runc-v2), which
// podvisor builds as a binary of its own (./cmd/containerd-shim-runc-v2)
// rather than as a mode of podvisor: a shim per pod runs as long as the pod,
// so it should be small, and starting one should not initialise the whole
// control plane that podvisor's binary carries. It builds with CGO_ENABLED=0.
package shim

import (
	"context"

	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/manager"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task/plugin"
	"github.com/containerd/containerd/v2/pkg/shim"
)

// Main runs the shim with the process's arguments, as containerd starts it.
func Main() {
	shim.RunShim(context.Background(), manager.NewShimManager("io.containerd.runc.v2"))
}
