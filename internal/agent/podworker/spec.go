package podworker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/expansion"
	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/podsecurity"
	"github.com/podvisor/podvisor/internal/agent/volume"
	"github.com/podvisor/podvisor/internal/runtime"
)

// buildSpec turns a container of the pod into what the runtime needs, with
// the pod's volumes set up first. Every way it can fail is a configError
// that the user sees on the container.
func (w *worker) buildSpec(ctx context.Context, pod *v1.Pod, c *v1.Container, attempt int32) (runtime.ContainerSpec, error) {
	features := w.m.cfg.Runtime.Features
	hasImages := w.m.cfg.Runtime.Images != nil
	if len(c.Command) == 0 && !hasImages {
		return runtime.ContainerSpec{}, configError{Msg: fmt.Sprintf(
			"container %q has no command: the process runtime runs host processes and has no image to supply an entrypoint; set command", c.Name)}
	}
	if (c.Stdin || c.TTY) && w.m.cfg.Runtime.Streams == nil { // nobody could attach to it
		return runtime.ContainerSpec{}, configError{Msg: fmt.Sprintf(
			"container %q: stdin and tty need a runtime that can attach to a container's main process, and this one has no interactive sessions", c.Name)}
	}
	if !features.Security {
		if what := podsecurity.Unenforceable(pod, c); what != "" {
			return runtime.ContainerSpec{}, configError{Msg: fmt.Sprintf(
				"container %q: %s cannot be honoured by the process runtime, whose containers are host processes (use --runtime=containerd)", c.Name, what)}
		}
	}
	if !hasImages {
		if why := volume.ImageVolumeUnsupported(pod, c); why != "" {
			return runtime.ContainerSpec{}, configError{Msg: why}
		}
	}
	user, err := containerspec.User(pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	if user != nil && !features.Users {
		return runtime.ContainerSpec{}, configError{Msg: fmt.Sprintf("container %q: runAsUser, runAsGroup and supplementalGroups need the agent to run as root", c.Name)}
	}
	// Volumes first: upstream mounts them before it looks at any container.
	paths, err := w.m.vols.SetUp(ctx, pod, w.podDir())
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	// Then the images of its image volumes and its own, before the
	// container's configuration, as upstream.
	imageIDs, err := w.m.vols.EnsureImages(ctx, pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	image, err := w.ensureImage(ctx, pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	if err := containerspec.VerifyRunAsNonRoot(pod, c, image.User); err != nil {
		return runtime.ContainerSpec{}, err
	}
	var budget expansion.Budget // env and command together
	w.mu.Lock()
	sandbox, podIP := w.sandboxIDLocked(), w.podIPLocked()
	targetName, target := ephemeralTarget(pod, c.Name), ""
	if list := w.instancesOf(targetName); targetName != "" && len(list) > 0 && list[len(list)-1].State == runtime.StateRunning {
		target = list[len(list)-1].ID
	}
	w.mu.Unlock()
	if targetName != "" && target == "" {
		return runtime.ContainerSpec{}, configError{Msg: fmt.Sprintf("container %q: its target container %q is not running", c.Name, targetName)}
	}
	env, err := w.m.containerEnv(ctx, pod, c, podIP, &budget)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	lookup := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		lookup[k] = v
	}
	cmd, err := containerspec.ExpandAll(c.Command, lookup, &budget)
	if err != nil {
		return runtime.ContainerSpec{}, configError{Msg: fmt.Sprintf("container %q: command or args %v", c.Name, err)}
	}
	args, err := containerspec.ExpandAll(c.Args, lookup, &budget)
	if err != nil {
		return runtime.ContainerSpec{}, configError{Msg: fmt.Sprintf("container %q: command or args %v", c.Name, err)}
	}
	if !hasImages {
		// No image to supply an entrypoint: args follow the command.
		cmd, args = append(cmd, args...), nil
	}
	mounts, err := w.m.vols.Mounts(pod, c, paths, imageIDs, lookup, volume.Runtime{Images: hasImages, Mounts: features.Mounts})
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	if hosts, ok, err := w.etcHostsMount(pod, c, podIP); err != nil {
		return runtime.ContainerSpec{}, err
	} else if ok {
		mounts = append(mounts, hosts)
	}
	dir := w.podDir()
	if err := os.MkdirAll(filepath.Join(dir, c.Name), 0o755); err != nil {
		return runtime.ContainerSpec{}, err
	}
	tmp := c.TerminationMessagePath
	if tmp == "" {
		tmp = v1.TerminationMessagePathDefault
	}
	spec := runtime.ContainerSpec{
		PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, SandboxID: sandbox, TargetID: target,
		Name: c.Name, Attempt: attempt, Image: image.ID, Command: cmd, Args: args, Env: env,
		StopSignal: stopSignal(c),
		WorkingDir: c.WorkingDir, LogPath: w.logPath(c.Name, attempt),
		TerminationMessagePath: tmp,
		Mounts:                 mounts,
		User:                   user,
		Stdin:                  c.Stdin, StdinOnce: c.StdinOnce, TTY: c.TTY,
	}
	if features.Limits {
		spec.Resources = containerspec.Resources(c)
		spec.OOMScoreAdj = lifecycle.OOMScoreAdj(pod, c, w.m.memoryCapacity())
	}
	if features.Security {
		if spec.Security, err = podsecurity.Container(pod, c, w.m.cfg.Security); err != nil {
			return runtime.ContainerSpec{}, configError{Msg: fmt.Sprintf("container %q: %v", c.Name, err)}
		}
	}
	return spec, nil
}

// memoryCapacity is the node's memory, which a Burstable container's OOM
// score is relative to: its capacity as the API has it, else what is
// allocatable; 0 when neither is known.
func (m *Manager) memoryCapacity() int64 {
	if m.cfg.Node != nil {
		if n, err := m.cfg.Node(); err == nil && n != nil {
			if q, ok := n.Status.Capacity[v1.ResourceMemory]; ok {
				return q.Value()
			}
		}
	}
	if m.cfg.Allocatable != nil {
		q := m.cfg.Allocatable()[v1.ResourceMemory]
		return q.Value()
	}
	return 0
}

// containerEnv is the container's environment (containerspec.Env) with the
// service links of the pod's namespace and the objects it reads, which the
// pod then watches.
func (m *Manager) containerEnv(ctx context.Context, pod *v1.Pod, c *v1.Container, podIP string, budget *expansion.Budget) ([]string, error) {
	services, err := m.serviceEnv(ctx, pod)
	if err != nil {
		return nil, err
	}
	in := containerspec.EnvInput{Pod: pod, Container: c, PodIP: podIP, HostIP: m.cfg.HostIP, Services: services,
		HostProcess: m.cfg.Runtime.Images == nil}
	if m.cfg.Allocatable != nil && slices.ContainsFunc(c.Env, func(e v1.EnvVar) bool {
		return e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil
	}) {
		in.Allocatable = m.cfg.Allocatable() // a read of the Node: only when a limit may be unset
	}
	if in.HostProcess {
		in.Hostname, _ = os.Hostname()
	}
	return containerspec.Env(ctx, in, podObjects{m, pod.UID}, budget)
}

// podObjects reads a pod's ConfigMaps and Secrets through the manager, which
// watches them for the pod.
type podObjects struct {
	m   *Manager
	uid types.UID
}

func (o podObjects) ConfigMap(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
	return o.m.getConfigMap(ctx, o.uid, ns, name)
}

func (o podObjects) Secret(ctx context.Context, ns, name string) (*v1.Secret, error) {
	return o.m.getSecret(ctx, o.uid, ns, name)
}
