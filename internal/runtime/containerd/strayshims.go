package containerd

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/podvisor/podvisor/internal/host/proctree"
)

// Stray shims. containerd re-adopts the shims of its state directory when it
// starts again, but one it cannot load (a sandbox whose creation a crash
// interrupted: its shim runs, the shim's address was not written yet) it
// cleans up as dead and forgets, while the shim and the sandbox's pause
// process under it go on running, re-parented to PID 1, for good: no
// StopPodSandbox reaches them any more. So at every start, once containerd
// serves, the shims that name this containerd's socket as their -address
// and whose -id is no task containerd knows are killed with what runs under
// them, as `podvisor reset` kills all of them. Nothing creates a sandbox
// before Start returns, so no shim being started is taken for a stray one.

// Shim is a shim process of a containerd.
type Shim struct {
	PID int
	ID  string // its -id: the sandbox's (containerd groups a pod's containers in one shim)
}

// ShimsOf returns the shims in t of the containerd serving socket, in the
// CRI's namespace: found by their -address, as `podvisor reset` finds them
// by the state directory.
func ShimsOf(t proctree.Table, socket string) []Shim {
	var out []Shim
	for _, p := range t.Procs {
		if len(p.Args) == 0 || !strings.HasPrefix(filepath.Base(p.Args[0]), "containerd-shim") {
			continue
		}
		if flagValue(p.Args, "address") != socket || flagValue(p.Args, "namespace") != Namespace {
			continue
		}
		out = append(out, Shim{PID: p.PID, ID: flagValue(p.Args, "id")})
	}
	return out
}

// StrayShims returns the shims of ShimsOf whose -id is not a task that
// containerd knows. A shim without an -id is not one to judge.
func StrayShims(t proctree.Table, socket string, known func(id string) bool) []Shim {
	var out []Shim
	for _, s := range ShimsOf(t, socket) {
		if s.ID != "" && !known(s.ID) {
			out = append(out, s)
		}
	}
	return out
}

// flagValue is the value of -name (or --name) in args, as Go's flag package
// reads it: "-name value" or "-name=value"; "" when absent.
func flagValue(args []string, name string) string {
	for i, a := range args[1:] {
		k, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || k != name {
			continue
		}
		if hasValue {
			return v
		}
		if i+2 < len(args) {
			return args[i+2]
		}
	}
	return ""
}

// removeStrayShims kills the stray shims of this containerd and what runs
// under them, and says which it killed.
func (c *Client) removeStrayShims(ctx context.Context, socket string, log *slog.Logger) {
	resp, err := c.c.TaskService().List(namespaces.WithNamespace(ctx, Namespace), &tasks.ListTasksRequest{})
	if err != nil {
		log.Warn("containerd: cannot list its tasks: shims left over by a crash are not looked for", "err", err)
		return
	}
	known := map[string]bool{}
	for _, t := range resp.Tasks {
		known[t.ID] = true
	}
	table := proctree.Read()
	stray := StrayShims(table, socket, func(id string) bool { return known[id] })
	if len(stray) == 0 {
		return
	}
	pids := map[int]bool{}
	for _, s := range stray {
		pids[s.PID] = true
	}
	tree := table.Trees(func(p proctree.Process) bool { return pids[p.PID] })
	killed := proctree.Kill(tree)
	for _, s := range stray {
		log.Warn("containerd: killed a shim it no longer knows, left over by a crash, with what ran under it", "pid", s.PID, "sandbox", s.ID)
	}
	slices.Sort(tree)
	log.Info("containerd: stray shims removed", "shims", len(stray), "processes", killed, "pids", tree)
}
