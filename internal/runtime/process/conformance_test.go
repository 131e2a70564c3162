package process

import (
	"context"
	"log/slog"
	"testing"

	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/runtimetest"
)

// The process runtime keeps the contract every runtime keeps, with and
// without cgroups.
func TestConformance(t *testing.T) {
	bothWays(t, func(t *testing.T, r *Runtime) {
		runtimetest.Run(t, runtimetest.Harness{
			New: func(t *testing.T) runtime.Set {
				r := newRuntimeWith(t, Config{Root: t.TempDir(), NoCgroups: r.noCg})
				t.Cleanup(func() { removeAll(t, r) })
				return r.Set(nil)
			},
			Restart: func(t *testing.T, old runtime.Set, away func()) runtime.Set {
				o := old.Containers.(*Runtime)
				o.Close()
				away()
				return newRuntimeWith(t, Config{Root: o.root, NoCgroups: o.noCg}).Set(nil)
			},
			Shell: func(spec *runtime.ContainerSpec, script string) {
				spec.Command = []string{"sh", "-c", script}
			},
		})
	})
}

// removeAll removes, through a runtime value of its own (the test's may be
// closed), every sandbox and container under r's root.
func removeAll(t *testing.T, r *Runtime) {
	c, err := New(Config{Root: r.root, ShimBinary: r.shim, NoCgroups: r.noCg, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	ctx := stopCtx(t)
	sbs, _ := c.ListSandboxes(ctx)
	for _, sb := range sbs {
		if err := c.RemoveSandbox(ctx, sb.ID); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	list, _ := c.List(context.Background())
	for _, s := range list {
		if err := c.Remove(ctx, s.ID); err != nil && !isNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
	}
}
