package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/node"
	"github.com/podvisor/podvisor/internal/agent/podcgroup"
	"github.com/podvisor/podvisor/internal/agent/podworker"
	"github.com/podvisor/podvisor/internal/runtime/containerd"
	"github.com/podvisor/podvisor/internal/runtime/cri"
	"github.com/podvisor/podvisor/internal/runtime/process"
)

// Runtime kinds (`--runtime`).
const (
	// RuntimeContainerd runs OCI images on a containerd that podvisor runs
	// itself, through the CRI: the default.
	RuntimeContainerd = "containerd"
	// RuntimeProcess runs containers as host processes, without images.
	RuntimeProcess = "process"
)

// RuntimeConfig chooses the container runtime.
type RuntimeConfig struct {
	// Kind is RuntimeContainerd (empty means it) or RuntimeProcess.
	Kind string
	// Endpoint is an existing CRI runtime's socket ("unix:///run/…"), used
	// instead of a containerd of podvisor's own (the kubelet's
	// --container-runtime-endpoint). It takes precedence over Kind.
	Endpoint string
}

func (c RuntimeConfig) kind() string {
	switch {
	case c.Endpoint != "":
		return "cri"
	case c.Kind == "":
		return RuntimeContainerd
	default:
		return c.Kind
	}
}

// Check refuses an unknown runtime before anything starts.
func (c RuntimeConfig) Check() error {
	switch c.kind() {
	case RuntimeContainerd, RuntimeProcess, "cri":
		return nil
	}
	return fmt.Errorf("--runtime %q: want %s or %s (or --container-runtime-endpoint for a CRI runtime of your own)", c.Kind, RuntimeContainerd, RuntimeProcess)
}

// openRuntime starts the runtime the config chooses: for containerd, its
// process first. It fails at once, naming the missing piece and the flag,
// rather than half-starting.
func (a *Agent) openRuntime(agentDir, hostIP string) error {
	rc := a.cfg.Runtime
	if err := rc.Check(); err != nil {
		return err
	}
	if rc.kind() == RuntimeProcess {
		proc, err := process.New(process.Config{Root: filepath.Join(agentDir, "containers"), Log: a.cfg.Log, HostIPs: []string{hostIP}})
		if err != nil {
			return err
		}
		s, err := process.NewStreamServer(proc)
		if err != nil {
			return err
		}
		a.runtime, a.serveStreams = proc.Set(s), s.Run
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	endpoint := rc.Endpoint
	if endpoint == "" {
		p, err := containerd.Start(ctx, containerd.Options{DataDir: a.cfg.DataDir, Log: a.cfg.Log})
		if err != nil {
			return fmt.Errorf("%w (--runtime=%s runs containers as host processes, without images)", err, RuntimeProcess)
		}
		a.containerd = p
		endpoint = p.Endpoint()
		// podvisor's containerd uses cgroupfs: pods get the kubelet's
		// hierarchy by QoS class. (A runtime of the user's own may use
		// systemd's cgroups: left to it.)
		if cg, err := podcgroup.New("/sys/fs/cgroup"); err != nil {
			a.cfg.Log.Warn("no pod-level cgroups", "err", err)
		} else {
			a.cgroups = cg
		}
	}
	criCfg := cri.Config{Endpoint: endpoint, StateDir: filepath.Join(agentDir, "cri"), HostIPs: []string{hostIP}, Log: a.cfg.Log}
	if p := a.containerd; p != nil {
		// The exits podvisor's shim keeps, for those containerd loses
		// when it is killed while it handles them.
		criCfg.ExitKept = func(id string) (uint32, time.Time, bool) {
			e, ok := p.ExitKept(id)
			return e.ExitStatus, e.ExitedAt, ok
		}
	}
	r, err := cri.New(ctx, criCfg)
	if err != nil {
		a.stopContainerd()
		return fmt.Errorf("CRI runtime at %s: %w", endpoint, err)
	}
	if a.containerd != nil && os.Getenv("PODVISOR_EARLY_EXITS") != "0" {
		// Exits straight from containerd: the CRI reports them only after
		// containerd's own handling of each (cri/exits.go), which keeps
		// them on disk until the CRI does. PODVISOR_EARLY_EXITS=0 waits
		// for the CRI, as a kubelet does.
		ctx, cancel := context.WithCancel(context.Background())
		a.stopExits = cancel
		go a.containerd.WatchTaskExits(ctx, func(e containerd.TaskExit) {
			r.ObserveTaskExit(e.ContainerID, e.ExitStatus, e.ExitedAt)
		})
	}
	a.runtime = r.Set()
	return nil
}

// networkPending is the node's readiness until the pod network exists
// (podvisor's containerd gets it once the node has a pod CIDR), worded as
// a kubelet's whose runtime reports NetworkReady false.
var networkPending = node.Readiness{Message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"}

// runtimeVersion is the node's containerRuntimeVersion of a CRI runtime:
// "containerd://2.3.6"; empty for the process runtime (the node says
// podvisor-process).
func (a *Agent) runtimeVersion() string {
	if a.cfg.Runtime.kind() == RuntimeProcess {
		return ""
	}
	info := a.runtime.Info
	return info.Name + "://" + info.Version
}

// stopContainerd stops podvisor's containerd, if it runs one; the
// containers go on running and are re-adopted by the next start.
func (a *Agent) stopContainerd() {
	if a.stopExits != nil {
		a.stopExits()
	}
	if a.containerd == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.containerd.Stop(ctx); err != nil {
		a.cfg.Log.Warn("stopping containerd", "err", err)
	}
}

// setUpPodNetwork waits for the node's pod CIDR (allocated by the
// controller manager once the node is registered), writes containerd's pod
// network for it and marks the node's network ready.
func (a *Agent) setUpPodNetwork(ctx context.Context) error {
	if a.containerd == nil {
		return nil
	}
	var cidr netip.Prefix
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		n, err := a.getNode()
		if err == nil && n.Spec.PodCIDR != "" {
			if cidr, err = netip.ParsePrefix(n.Spec.PodCIDR); err != nil {
				return fmt.Errorf("node %s: spec.podCIDR %q: %w", a.cfg.NodeName, n.Spec.PodCIDR, err)
			}
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := a.containerd.SetPodCIDR(sctx, cidr, a.cfg.ClusterCIDR); err != nil {
		return err
	}
	a.node.SetNetworkReadiness(node.Readiness{Ready: true})
	a.cfg.Log.Info("pod network ready", "podCIDR", cidr.String())
	return a.routePodNetwork(ctx)
}

// watchContainerd ends the agent's runtime when containerd dies: its pods
// cannot be run without it, and silently going on would hide it.
func (a *Agent) watchContainerd(ctx context.Context) {
	if a.containerd == nil {
		return
	}
	select {
	case <-ctx.Done():
		a.stopContainerd()
	case <-a.containerd.Done():
		err := a.containerd.Err()
		if err == nil {
			err = errors.New("exited")
		}
		a.cfg.Log.Error("containerd stopped", "err", err)
		a.node.SetNetworkReadiness(node.Readiness{Message: fmt.Sprintf("container runtime is down: containerd: %v", err)})
	}
}

// podCgroups is the pod cgroup manager for the pod worker (a nil interface
// when there is none).
func (a *Agent) podCgroups() podworker.PodCgroups {
	if a.cgroups == nil {
		return nil
	}
	return a.cgroups
}

// podProcesses counts a pod's processes in its pod-level cgroup (for PID
// pressure eviction on a CRI runtime); nil without pod cgroups.
func (a *Agent) podProcesses() func(*v1.Pod) (int64, bool) {
	if a.cgroups == nil {
		return nil
	}
	return func(pod *v1.Pod) (int64, bool) {
		n, err := a.cgroups.Processes(podcgroup.Parent(string(pod.UID), lifecycle.QOSClass(pod)))
		return n, err == nil
	}
}
