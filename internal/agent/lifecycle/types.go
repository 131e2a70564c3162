// Package lifecycle is the pure core of the node agent: from a snapshot of one
// pod (spec, what the runtime observed, probe results, the clock) it computes
// the plan (which containers to start or stop, when to look again) and the pod
// status to publish. No goroutines, no I/O, no clients, no wall clock.
//
// Rules come from docs/lifecycle.md; each function names the
// section it implements.
package lifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// ContainerState of one observed container instance. Zero means unknown.
type ContainerState int

const (
	StateUnknown ContainerState = iota
	StateCreated
	StateRunning
	StateExited
)

// Instance is one container instance as the runtime reports it.
type Instance struct {
	ID         string // with scheme, e.g. "podvisor://3f2a…"
	Attempt    int32  // the restartCount it was created with
	State      ContainerState
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	ExitCode   int32
	Signal     int32
	Reason     string // runtime-given terminated reason ("StartError", "OOMKilled"); empty: derive from exit code
	Message    string // terminated message (termination-message file, or exec error for StartError)
	// Image and ImageID are the instance's image as the runtime reports it;
	// empty for a runtime without images, whose status shows the spec's.
	Image   string
	ImageID string
	// PostStartDone is true once the postStart hook returned successfully (or
	// the container has none). A running container is not reported Running
	// until then (§3, §7).
	PostStartDone bool
	// OldSandbox: the instance ran in a sandbox that is not the pod's ready
	// one any more (it died, the node rebooted, or a newer one replaced it).
	// Such an instance is stopped, and the pod runs again in a new sandbox
	// from its first init container (sandbox.go).
	OldSandbox bool
}

// ContainerRecord is what is known of one container of the spec.
type ContainerRecord struct {
	Current  *Instance // newest instance; nil if none was ever created
	Previous *Instance // the instance before Current (for lastState); nil if none
	// Waiting, when set, is a reason the agent could not create the container
	// (CreateContainerConfigError, RunContainerError) with its message.
	Waiting *v1.ContainerStateWaiting
	// WaitingSince is when Waiting was recorded: the core plans the next
	// attempt InitialBackOff (capped at MaxBackOff) later, and sets WakeAt
	// to it. Zero: retry at once.
	WaitingSince time.Time
	// Stopping is true while the agent is stopping Current (a kill is in
	// flight): the core must not plan another kill or a start for it.
	Stopping bool
	// Starting is true while a start (create, start, postStart) is in flight.
	Starting bool
	// ResizeRestart: Current was stopped because a resize of a resource
	// whose resizePolicy is RestartContainer; once it exited it starts
	// again at once, whatever the restart policy and back-off (resize.go).
	ResizeRestart bool
}

// ProbeState is the probe manager's verdict for one container (§6). A
// container without a given probe has the zero value for it; the core uses
// the spec to know which probes exist.
type ProbeState struct {
	Started bool // startup probe succeeded (meaningless if there is no startup probe)
	Ready   bool // readiness probe result (meaningless if there is no readiness probe)
	// Unhealthy is set when liveness or startup reached failureThreshold for
	// Current: the container must be killed and then handled by restart policy.
	Unhealthy bool
	// KillMessage is the Killing event message, e.g.
	// "Container c failed liveness probe, will be restarted".
	KillMessage string
	// Grace overrides the pod's grace period for this kill (probe-level
	// terminationGracePeriodSeconds); nil: the pod's.
	Grace *int64
}

// BackOffEntry is the crash-loop back-off of one container (§4).
type BackOffEntry struct {
	Delay      time.Duration // the delay to wait before the next restart
	LastUpdate time.Time     // when Delay was last changed
}

// Config holds node-level settings.
type Config struct {
	InitialBackOff time.Duration // 10s
	MaxBackOff     time.Duration // 300s, or crashLoopBackOff.maxContainerRestartPeriod
	BackOffReset   time.Duration // 10m
}

// DefaultConfig is upstream's.
func DefaultConfig() Config {
	return Config{InitialBackOff: 10 * time.Second, MaxBackOff: 300 * time.Second, BackOffReset: 10 * time.Minute}
}

// Termination says the agent has decided to stop the whole pod.
type Termination struct {
	Since time.Time     // when it was decided (the grace clock starts here)
	Grace time.Duration // the grace period for every container
	// Reason and Message, when set, become status.reason/status.message and
	// make the phase Failed (unless Succeeded): "DeadlineExceeded",
	// "Terminated" (node shutdown), "Evicted". Empty for a plain deletion.
	Reason  string
	Message string
	// KillMessage is the Killing event message; empty: "Stopping container <c>".
	KillMessage string
}

// Snapshot is the input of Compute.
type Snapshot struct {
	Pod    *v1.Pod // as in the API; Pod.Status holds what was last published
	Now    time.Time
	Config Config
	// SandboxReady: the pod's newest sandbox is ready (its network, and the
	// pod IP), so that containers can start; without, the plan asks for one.
	// Instances of earlier sandboxes are marked Instance.OldSandbox.
	SandboxReady bool
	HostIP       string
	PodIP        string
	Containers   map[string]ContainerRecord // by container name (init and regular)
	Probes       map[string]ProbeState      // by container name
	BackOff      map[string]BackOffEntry    // by container name
	// Termination is set when the agent stops the pod (deletion, deadline,
	// shutdown). For a deletion the worker sets it from deletionTimestamp.
	Termination *Termination
	// Resize is the pod's in-place resize: what is allocated, what runs
	// (resize.go). The zero value: the spec's resources, all actuated.
	Resize Resize
}

// ActionKind is what the worker must do. Zero means unknown.
type ActionKind int

const (
	ActionUnknown ActionKind = iota
	// ActionStart creates and starts a new instance of Container with
	// restartCount Attempt (then runs its postStart hook).
	ActionStart
	// ActionKill stops Current of Container: preStop, stop signal, SIGKILL after Grace.
	ActionKill
	// ActionReset stops Current of Container without preStop and with the
	// minimum grace, then removes every instance of it, so that it starts
	// afresh (RestartAllContainers, KEP-5532).
	ActionReset
	// ActionRunSandbox makes the pod's sandbox; containers start once it
	// is ready.
	ActionRunSandbox
	// ActionResize changes the resources of Current of Container in place
	// to Resources (its allocation). The resizes of one plan are carried
	// out together, in order, with the pod's cgroup around them.
	ActionResize
)

// Action is one step of a plan.
type Action struct {
	Kind      ActionKind
	Container string
	Init      bool // Container is an init container (sidecars included)
	Attempt   int32
	Grace     time.Duration
	Message   string // for ActionKill: the Killing event message
	// Resize, for ActionKill: the kill restarts the container for a resize
	// (the worker sets ContainerRecord.ResizeRestart for the instance).
	Resize bool
	// Resources, for ActionResize: what the container is to run with.
	Resources *v1.ResourceRequirements
}

// Event is an event the core decides on (the worker records it on the pod).
type Event struct {
	Container string
	Type      string // v1.EventTypeNormal or v1.EventTypeWarning
	Reason    string
	Message   string
}

// Plan is the output of Compute.
type Plan struct {
	Actions []Action
	// WakeAt is when Compute wants to run again even if nothing happens (end
	// of a back-off, active deadline); zero: no timer.
	WakeAt time.Time
	Status v1.PodStatus
	// BackOff is the updated back-off state; the worker stores it and passes it back.
	BackOff map[string]BackOffEntry
	Events  []Event
	// Done is true when the pod has reached its end on this node: terminal
	// phase and no container running (or, when terminating, everything stopped).
	Done bool
}
