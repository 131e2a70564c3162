// Package runtime is the seam between the agent and whatever runs
// containers, split by concern: each runtime (runtime/cri, runtime/process)
// hands out a Set (set.go) of small interfaces — containers, sandboxes,
// exec, stats, events, and the optional images, streams and logs — with
// the types they share (this file) and one set of error classes
// (errors.go).
package runtime

import (
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
	Name         string // container name
	Attempt      int32  // restart count this instance is created with
	// SandboxID is the pod sandbox the container joins (RunSandbox).
	SandboxID string `json:",omitempty"`
	// TargetID, for an ephemeral container with targetContainerName, is
	// the running instance whose PID namespace it joins.
	TargetID string `json:",omitempty"`
	// Image is the image reference to run; empty for a runtime without
	// images (Set.Images nil).
	Image string `json:",omitempty"`
	// Command and Args, already expanded, with Kubernetes' override rules
	// left to the runtime: an empty Command means the image's entrypoint,
	// an empty Command and Args the image's cmd as well. Without images,
	// Command is required and Command[0] is looked up in PATH.
	Command []string
	Args    []string `json:",omitempty"`
	// StopSignal is what Stop sends first (the container's
	// lifecycle.stopSignal); 0: the image's STOPSIGNAL, else SIGTERM.
	StopSignal syscall.Signal `json:",omitempty"`
	Env        []string       // KEY=VALUE
	WorkingDir string         // empty: the container's own directory
	LogPath    string         // where the CRI-format log of this instance goes
	// TerminationMessagePath is the path inside the container where the
	// process may write its termination message; the runtime maps it to a host file.
	TerminationMessagePath string
	Labels                 map[string]string
	// Mounts are bind mounts into the container's private mount namespace.
	Mounts []Mount `json:",omitempty"`
	// Resources are the container's cgroup limits; zero values mean unlimited.
	Resources Resources
	// OOMScoreAdj is the oom_score_adj of the container's processes; 0:
	// the runtime's. Honoured with Features.Limits.
	OOMScoreAdj int `json:",omitempty"`
	// User, when set, is who the container's processes run as; nil: the agent's user.
	User *Credential `json:",omitempty"`
	// Stdin keeps the main process's stdin open for attach; StdinOnce
	// closes it when the first attach session ends; TTY runs it on a
	// pseudo-terminal. Only a runtime with Set.Streams (attach) honours them.
	Stdin     bool `json:",omitempty"`
	StdinOnce bool `json:",omitempty"`
	TTY       bool `json:",omitempty"`
	// Security is the container's effective securityContext (privileges,
	// capabilities, seccomp, /proc masking); nil: the runtime's defaults.
	// Only a runtime with Features.Security honours it.
	Security *Security `json:",omitempty"`
}

// Security is what a container may do, as the kubelet passes it to a CRI
// runtime (LinuxContainerSecurityContext less user and namespaces).
type Security struct {
	Privileged     bool
	ReadOnlyRootfs bool
	// NoNewPrivs: allowPrivilegeEscalation false.
	NoNewPrivs bool
	// CapAdd and CapDrop are capability names as the API gives them
	// ("NET_ADMIN", "ALL").
	CapAdd, CapDrop []string
	Seccomp         SecurityProfile
	AppArmor        SecurityProfile
	// UnmaskedProc: procMount Unmasked, no /proc path masked or read-only;
	// otherwise the kubelet's default lists (podsecurity).
	UnmaskedProc bool
}

// SecurityProfile is a seccomp or AppArmor profile: Type "" (none set),
// "Unconfined", "RuntimeDefault" or "Localhost" with Path (seccomp: the
// profile's host file; AppArmor: the loaded profile's name).
type SecurityProfile struct {
	Type string `json:",omitempty"`
	Path string `json:",omitempty"`
}

// Mount makes HostPath visible at ContainerPath inside the container; with
// Image set, an image's filesystem instead (an image volume).
type Mount struct {
	HostPath      string
	ContainerPath string
	ReadOnly      bool
	// Image, instead of HostPath, is the ID of an image the runtime has,
	// whose filesystem it mounts read-only at ContainerPath (CRI
	// Mount.image); only a runtime with Set.Images honours it.
	// ImageName is the reference as the pod spec writes it; ImageSubPath, a
	// directory inside the image to mount instead of its root.
	Image        string `json:",omitempty"`
	ImageName    string `json:",omitempty"`
	ImageSubPath string `json:",omitempty"`
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
	// UIDUnset and GIDUnset: the pod does not set runAsUser (runAsGroup).
	// A runtime with images then runs the image's USER (and its group); one
	// without runs UID 0, and GID as computed (the user's group on the host).
	UIDUnset, GIDUnset bool
	// StrictGroups: supplementalGroupsPolicy Strict, Groups only; otherwise
	// a runtime with images adds the groups the image's /etc/group gives
	// the user (Merge).
	StrictGroups bool `json:",omitempty"`
}

// Features are properties of how a runtime's containers and sandboxes
// honour their specs, not capabilities: every runtime has Containers and
// Sandboxes, and these say whether a field of ContainerSpec or SandboxSpec
// takes effect on this one (the process runtime honours mounts, limits and
// users only as root, limits only with cgroups). A concern a runtime lacks
// altogether is a nil field of Set instead (Images, Streams, Logs).
type Features struct {
	Mounts bool // ContainerSpec.Mounts (a private mount namespace)
	Limits bool // ContainerSpec.Resources
	Users  bool // ContainerSpec.User
	// PodNetwork: a sandbox that is not HostNetwork gets its own network
	// namespace and IP; without, every pod is on the host's network.
	PodNetwork bool
	// Security: ContainerSpec.Security and the sandbox's namespaces and
	// sysctls are honoured; without, containers run with the runtime's
	// own (the host's) privileges.
	Security bool
}

// Info names a runtime, for container IDs and the Node's status.
type Info struct {
	// Name is the scheme of container IDs in pod status ("containerd" in
	// "containerd://<id>").
	Name string
	// Version is the runtime's own version, e.g. "2.3.1".
	Version string
}

// Status is what the runtime knows of one container instance.
type Status struct {
	ID           string // unique, stable across agent restarts; status shows "<Info.Name>://<ID>"
	SandboxID    string
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
	// Image and ImageRef are the instance's image as the runtime reports
	// it (CRI: the image's first tag, and its repo digest or ID); the pod's
	// status shows them as image and imageID. Empty without images.
	Image    string `json:",omitempty"`
	ImageRef string `json:",omitempty"`
}

// Event says a container changed state; the agent re-reads its status.
// With Sandbox set, it is a pod sandbox's: State is StateExited once the
// sandbox stopped (SandboxNotReady), and the agent re-reads SandboxStatus.
type Event struct {
	ID      string
	PodUID  string
	Name    string
	State   State
	Sandbox bool `json:",omitempty"`
}
