// Package runtime is the narrow interface between the agent and whatever runs
// containers. The default implementation is runtime/process (host processes
// supervised by a podvisor shim).
package runtime

import (
	"context"
	"io"
	"syscall"
	"time"
)

// State of a container instance. The zero value means unknown; the others
// are declared in the order an instance goes through them (callers compare).
type State int

const (
	StateUnknown State = iota
	StateCreated       // created, not started
	StateRunning
	StateExited
)

func (s State) String() string {
	switch s {
	case StateCreated:
		return "created"
	case StateRunning:
		return "running"
	case StateExited:
		return "exited"
	}
	return "unknown"
}

// ContainerSpec is everything needed to create one container instance.
type ContainerSpec struct {
	PodUID       string
	PodNamespace string
	PodName      string
	Name         string   // container name
	Attempt      int32    // restart count this instance is created with
	Command      []string // command followed by args, already expanded; Command[0] looked up in PATH
	Env          []string // KEY=VALUE
	WorkingDir   string   // empty: the container's own directory
	LogPath      string   // where the CRI-format log of this instance goes
	// TerminationMessagePath is the path inside the container where the
	// process may write its termination message; the runtime maps it to a host file.
	TerminationMessagePath string
	Labels                 map[string]string
	// Mounts are bind mounts into the container's private mount namespace.
	Mounts []Mount `json:",omitempty"`
	// Resources are the container's cgroup limits; zero values mean unlimited.
	Resources Resources
	// User, when set, is who the container's processes run as; nil: the agent's user.
	User *Credential `json:",omitempty"`
}

// Mount makes HostPath visible at ContainerPath inside the container.
type Mount struct {
	HostPath      string
	ContainerPath string
	ReadOnly      bool
}

// Resources are cgroup limits; a zero field is not set.
type Resources struct {
	MemoryLimitBytes int64
	CPUQuotaMicros   int64 // per CPUPeriodMicros
	CPUPeriodMicros  int64
	CPUShares        uint64 // cgroup v1 cpu.shares; converted to cpu.weight on v2
}

// Credential is a user, primary group and supplementary groups.
type Credential struct {
	UID    uint32
	GID    uint32
	Groups []uint32
}

// Features says what a runtime can honour, so that the agent can refuse a
// container it cannot run as specified with a clear reason instead of
// running it differently.
type Features struct {
	Mounts bool // ContainerSpec.Mounts (a private mount namespace)
	Limits bool // ContainerSpec.Resources
	Users  bool // ContainerSpec.User
}

// FeatureReporter is implemented by runtimes that cannot honour every field
// of ContainerSpec; a runtime that does not implement it honours them all.
type FeatureReporter interface {
	Features() Features
}

// Status is what the runtime knows of one container instance.
type Status struct {
	ID           string // unique, stable across agent restarts; status shows "podvisor://<ID>"
	PodUID       string
	PodNamespace string
	PodName      string
	Name         string
	Attempt      int32
	State        State
	Pid          int // main process, while running
	CreatedAt    time.Time
	StartedAt    time.Time
	FinishedAt   time.Time
	ExitCode     int32
	Signal       int32  // the signal that killed the main process, 0 if it exited
	Reason       string // set by the runtime only when it knows better than the exit code: "StartError", "OOMKilled"
	Message      string // for StartError: the exec error
	LogPath      string
	// TerminationMessageFile is the host path of the termination message file.
	TerminationMessageFile string
	Labels                 map[string]string
}

// Event says a container changed state; the agent re-reads its status.
type Event struct {
	ID     string
	PodUID string
	Name   string
	State  State
}

// Runtime runs containers. All methods are safe for concurrent use.
type Runtime interface {
	// Create prepares an instance; it does not run anything.
	Create(ctx context.Context, spec ContainerSpec) (id string, err error)
	// Start runs the instance's process in its own process group under a shim
	// that outlives the agent. A command that cannot be executed is not an
	// error: the instance goes to exited with Reason "StartError", exit code 128.
	Start(ctx context.Context, id string) error
	// Stop sends sig to the process group, waits up to grace, then SIGKILLs every
	// process of the container (orphans included), and returns once it exited.
	Stop(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) error
	// Remove deletes the instance and its state (not its log).
	Remove(ctx context.Context, id string) error
	Status(ctx context.Context, id string) (Status, error)
	// List returns every instance the runtime knows, including ones started by
	// an earlier agent process (re-adopted).
	List(ctx context.Context) ([]Status, error)
	// Exec runs cmd in the container's context (its env, working dir and, when
	// available, namespaces and cgroup), killing it after timeout.
	Exec(ctx context.Context, id string, cmd []string, stdout, stderr io.Writer, timeout time.Duration) (exitCode int, err error)
	// Events delivers state changes (start, exit) of every instance.
	Events() <-chan Event
}

// ErrNotFound is returned (wrapped) for an unknown container ID.
var ErrNotFound = errNotFound{}

type errNotFound struct{}

func (errNotFound) Error() string { return "container not found" }
