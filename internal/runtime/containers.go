package runtime

import (
	"context"
	"io"
	"time"
)

// Containers create, run and stop container instances. All methods are
// safe for concurrent use. Errors are wrapped in the classes of errors.go.
type Containers interface {
	// Create prepares an instance; it does not run anything.
	Create(ctx context.Context, spec ContainerSpec) (id string, err error)
	// Start runs the instance's process in its own process group under a shim
	// that outlives the agent. A command that cannot be executed is not an
	// error: the instance goes to exited with Reason "StartError", exit code 128.
	Start(ctx context.Context, id string) error
	// Stop sends the container's stop signal (ContainerSpec.StopSignal),
	// waits up to grace, then SIGKILLs every process of the container
	// (orphans included), and returns once it exited. Grace 0 kills at once.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Remove deletes the instance and its state (not its log).
	Remove(ctx context.Context, id string) error
	Status(ctx context.Context, id string) (Status, error)
	// List returns every instance the runtime knows, including ones started by
	// an earlier agent process (re-adopted).
	List(ctx context.Context) ([]Status, error)
	// UpdateResources changes the cgroup limits of an instance in place
	// (in-place pod resize), without restarting it: a running instance's
	// cgroups at once, a created one's when it starts. A zero field leaves
	// that limit as it is (a limit is never removed in place). An exited
	// instance is ErrConflict. On a runtime without Features.Limits it
	// records the values and enforces nothing, as at Create.
	UpdateResources(ctx context.Context, id string, r Resources) error
}

// Executor runs commands in running containers and waits for them (probes,
// hooks, the agent API's /run); interactive sessions are Streamer's.
type Executor interface {
	// Exec runs cmd in the container's context (its env, working dir and, when
	// available, namespaces and cgroup), killing it after timeout.
	Exec(ctx context.Context, id string, cmd []string, stdout, stderr io.Writer, timeout time.Duration) (exitCode int, err error)
}

// Stats measure containers.
type Stats interface {
	// Usage measures what a container uses now, for eviction and resize.
	Usage(ctx context.Context, id string) (Usage, error)
}

// Usage is what one container uses (CRI's ContainerStats); a measure the
// runtime cannot take is 0.
type Usage struct {
	// MemoryWorkingSet is memory usage less inactive file pages, as
	// cAdvisor's working set.
	MemoryWorkingSet int64
	// MemoryUsage is the cgroup's memory usage (page cache included) and
	// MemoryRSS its anonymous and swap cache memory, as cAdvisor's.
	MemoryUsage, MemoryRSS int64
	// CPUUsageCoreNanoSeconds is the CPU time the container used since it
	// started (cumulative, all cores).
	CPUUsageCoreNanoSeconds uint64
	// Processes are the container's tasks.
	Processes int64
	// WritableBytes and WritableInodes are the container's writable layer.
	WritableBytes  int64
	WritableInodes int64
}

// LogReopener is what a runtime whose container logs can be rotated has: the agent
// renames a running container's LogPath, then ReopenContainerLog makes the
// writer of that log open LogPath anew (CRI's ReopenContainerLog) and
// returns once it did. A container that is not running is ErrConflict.
type LogReopener interface {
	ReopenContainerLog(ctx context.Context, id string) error
}
