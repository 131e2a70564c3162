package process

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// The test binary is its own shim: `<test binary> __shim <dir>` runs RunShim,
// exactly what `podvisor __shim` does, without building all of podvisor.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ShimCommand {
		os.Exit(RunShim(os.Args[2:]))
	}
	os.Exit(m.Run())
}

const waitLimit = 20 * time.Second

func newRuntime(t *testing.T, root string) *Runtime {
	return newRuntimeWith(t, Config{Root: root})
}

func newRuntimeWith(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	cfg.Log = slog.New(slog.NewTextHandler(t.Output(), nil))
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// bothWays runs a test with cgroups (when root) and without, where the
// shim's process tree is all there is to find a container's processes.
func bothWays(t *testing.T, test func(t *testing.T, r *Runtime)) {
	t.Run("cgroup", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("cgroups need root")
		}
		test(t, newRuntime(t, t.TempDir()))
	})
	t.Run("process-tree", func(t *testing.T) {
		test(t, newRuntimeWith(t, Config{Root: t.TempDir(), NoCgroups: true}))
	})
}

func testSpec(t *testing.T, command ...string) runtime.ContainerSpec {
	return runtime.ContainerSpec{
		PodUID: "uid-1", PodNamespace: "default", PodName: "p", Name: "c",
		Command:                command,
		LogPath:                filepath.Join(t.TempDir(), "logs", "c", "0.log"),
		TerminationMessagePath: "/dev/termination-log",
	}
}

// run creates and starts an instance and stops it at the end of the test.
func run(t *testing.T, r *Runtime, spec runtime.ContainerSpec) string {
	t.Helper()
	ctx := context.Background()
	id, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A runtime of its own: r may be closed by then (an agent restart).
		c, err := New(Config{Root: r.root, ShimBinary: r.shim, NoCgroups: r.noCg, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		if err := c.Remove(stopCtx(t), id); err != nil && !isNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
	})
	return id
}

// waitEvent reads r's events until one says id reached state.
func waitEvent(t *testing.T, r *Runtime, id string, state runtime.State) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case ev := <-r.Events():
			if ev.ID == id && ev.State == state {
				return
			}
		case <-deadline:
			t.Fatalf("no %s event for %s within %v", state, id, waitLimit)
		}
	}
}

func waitExit(t *testing.T, r *Runtime, id string) runtime.Status {
	t.Helper()
	waitEvent(t, r, id, runtime.StateExited)
	return status(t, r, id)
}

func status(t *testing.T, r *Runtime, id string) runtime.Status {
	t.Helper()
	st, err := r.Status(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLog waits until the container log holds a line containing s.
func waitLog(t *testing.T, path, s string) {
	t.Helper()
	eventually(t, "log line "+s, func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), s)
	})
}

func alive(pid int) bool {
	s, err := readProcStat(pid)
	return err == nil && s.State != 'Z'
}

func isNotFound(err error) bool { return runtime.IsNotFound(err) }

// stopCtx bounds a Stop, so that a Stop that never returns fails the test.
func stopCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}
