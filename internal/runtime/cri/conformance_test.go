package cri

import (
	"context"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/runtimetest"
)

// The CRI runtime keeps the contract every runtime keeps, on a real
// containerd, with busybox as the shell image.
func TestConformance(t *testing.T) {
	c := needContainerd(t)
	runtimetest.Run(t, runtimetest.Harness{
		New: func(t *testing.T) runtime.Set {
			r := newRuntime(t, c, t.TempDir())
			t.Cleanup(func() { removeSandboxes(t, c, r.cfg.StateDir, r) })
			return r.Set()
		},
		Restart: func(t *testing.T, old runtime.Set, away func()) runtime.Set {
			o := old.Containers.(*Runtime)
			o.Close()
			away()
			return newRuntime(t, c, o.cfg.StateDir).Set()
		},
		Shell: func(spec *runtime.ContainerSpec, script string) {
			spec.Image = busyboxImage
			spec.Command = []string{"sh", "-c", script}
		},
	})
}

// removeSandboxes removes, through a runtime value of its own (the test's
// may be closed), the sandboxes the test's first runtime value made.
func removeSandboxes(t *testing.T, c *testContainerd, stateDir string, made *Runtime) {
	r := newRuntime(t, c, stateDir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	made.mu.Lock()
	var ids []string
	for id := range made.sandboxes {
		ids = append(ids, id)
	}
	made.mu.Unlock()
	for _, id := range ids {
		if err := r.RemoveSandbox(ctx, id); err != nil && !runtime.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
	}
}
