package runtime

import (
	"context"
	"time"
)

// A pod sandbox is what a pod's containers share: the network namespace
// (and with it the pod IP), and on a container runtime the IPC/UTS/PID
// namespaces and the pod's cgroup. The agent runs one before a pod's first
// container, and a new one (Attempt+1) if it dies; the process runtime's
// sandbox is the host itself (host network, the node's IP).
type Sandboxes interface {
	// RunSandbox creates and starts a sandbox; it is Ready when it returns.
	RunSandbox(ctx context.Context, spec SandboxSpec) (id string, err error)
	// StopSandbox stops the sandbox (and any container still in it) and
	// releases its network; it stays listed, NotReady, until removed.
	StopSandbox(ctx context.Context, id string) error
	// RemoveSandbox deletes a sandbox and every container in it.
	RemoveSandbox(ctx context.Context, id string) error
	SandboxStatus(ctx context.Context, id string) (SandboxStatus, error)
	// ListSandboxes returns every sandbox the runtime knows, including ones
	// an earlier agent process ran.
	ListSandboxes(ctx context.Context) ([]SandboxStatus, error)
}

// SandboxSpec is what a pod's sandbox is made with (CRI's PodSandboxConfig).
type SandboxSpec struct {
	PodUID       string
	PodNamespace string
	PodName      string
	Attempt      int32 // how many sandboxes the pod had before this one
	// Hostname of the pod (empty with HostNetwork: the node's).
	Hostname    string
	HostNetwork bool
	// LogDir is the pod's log directory; containers' LogPaths are inside it.
	LogDir      string
	Labels      map[string]string
	Annotations map[string]string
	DNS         *DNSConfig    `json:",omitempty"`
	Ports       []PortMapping `json:",omitempty"`
	// CgroupParent is the pod's cgroup; empty: the runtime's default.
	CgroupParent string `json:",omitempty"`
	// HostPID, HostIPC: the pod shares the node's PID or IPC namespace;
	// SharePID: its containers share one PID namespace
	// (shareProcessNamespace).
	HostPID  bool `json:",omitempty"`
	HostIPC  bool `json:",omitempty"`
	SharePID bool `json:",omitempty"`
	// Sysctls are set in the pod's namespaces (admitted before).
	Sysctls map[string]string `json:",omitempty"`
	// Privileged: a container of the pod is privileged (a CRI runtime
	// refuses one in a sandbox that is not).
	Privileged bool `json:",omitempty"`
	// Seccomp is the pod's own profile (the sandbox process's).
	Seccomp SecurityProfile `json:",omitempty"`
}

// DNSConfig is the resolv.conf a sandbox gets.
type DNSConfig struct {
	Servers  []string
	Searches []string
	Options  []string
}

// PortMapping is a hostPort.
type PortMapping struct {
	Protocol      string // TCP, UDP, SCTP
	ContainerPort int32
	HostPort      int32
	HostIP        string
}

// SandboxState is the state of a sandbox; the zero value means unknown.
type SandboxState int

const (
	SandboxUnknown  SandboxState = iota
	SandboxReady                 // running: its containers can run
	SandboxNotReady              // stopped or dead: its containers cannot run
)

func (s SandboxState) String() string {
	switch s {
	case SandboxReady:
		return "ready"
	case SandboxNotReady:
		return "notready"
	}
	return "unknown"
}

// SandboxStatus is what the runtime knows of one sandbox.
type SandboxStatus struct {
	ID           string
	PodUID       string
	PodNamespace string
	PodName      string
	Attempt      int32
	State        SandboxState
	CreatedAt    time.Time
	// IPs of the pod, the primary first; the node's IPs on the host network.
	IPs         []string
	HostNetwork bool
	Labels      map[string]string
}
