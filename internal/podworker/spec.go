package podworker

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/podvisor/podvisor/internal/expansion"
	"github.com/podvisor/podvisor/internal/lifecycle"
	"github.com/podvisor/podvisor/internal/podsecurity"
	"github.com/podvisor/podvisor/internal/runtime"
)

// buildSpec turns a container of the pod into what the runtime needs, with
// the pod's volumes set up first. Every way it can fail is a configError
// that the user sees on the container.
func (w *worker) buildSpec(ctx context.Context, pod *v1.Pod, c *v1.Container, attempt int32) (runtime.ContainerSpec, error) {
	features := w.m.cfg.Runtime.Features()
	if len(c.Command) == 0 && !features.Images {
		return runtime.ContainerSpec{}, configError{fmt.Sprintf(
			"container %q has no command: the process runtime runs host processes and has no image to supply an entrypoint; set command", c.Name)}
	}
	if (c.Stdin || c.TTY) && !features.Stdin {
		return runtime.ContainerSpec{}, configError{fmt.Sprintf(
			"container %q: stdin and tty need a runtime that keeps a container's stdin (the process runtime does not: use --runtime=containerd)", c.Name)}
	}
	if !features.Security {
		if what := podsecurity.Unenforceable(pod, c); what != "" {
			return runtime.ContainerSpec{}, configError{fmt.Sprintf(
				"container %q: %s cannot be honoured by the process runtime, whose containers are host processes (use --runtime=containerd)", c.Name, what)}
		}
	}
	if !features.Images {
		if why := imageVolumeUnsupported(pod, c); why != "" {
			return runtime.ContainerSpec{}, configError{why}
		}
	}
	user, err := containerUser(pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	if user != nil && !features.Users {
		return runtime.ContainerSpec{}, configError{fmt.Sprintf("container %q: runAsUser, runAsGroup and supplementalGroups need the agent to run as root", c.Name)}
	}
	// Volumes first: upstream mounts them before it looks at any container.
	paths, err := w.setupVolumes(ctx, pod)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	// Then the images of its image volumes and its own, before the
	// container's configuration, as upstream.
	imageIDs, err := w.ensureImageVolumes(ctx, pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	image, err := w.ensureImage(ctx, pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	if err := verifyRunAsNonRoot(pod, c, image.User); err != nil {
		return runtime.ContainerSpec{}, err
	}
	var budget expansion.Budget // env and command together
	w.mu.Lock()
	sandbox, podIP := w.sandboxIDLocked(), w.podIPLocked()
	targetName, target := ephemeralTarget(pod, c.Name), ""
	if list := w.instances[targetName]; targetName != "" && len(list) > 0 && list[len(list)-1].State == runtime.StateRunning {
		target = list[len(list)-1].ID
	}
	w.mu.Unlock()
	if targetName != "" && target == "" {
		return runtime.ContainerSpec{}, configError{fmt.Sprintf("container %q: its target container %q is not running", c.Name, targetName)}
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
	cmd, err := expandAll(c.Command, lookup, &budget)
	if err != nil {
		return runtime.ContainerSpec{}, configError{fmt.Sprintf("container %q: command or args %v", c.Name, err)}
	}
	args, err := expandAll(c.Args, lookup, &budget)
	if err != nil {
		return runtime.ContainerSpec{}, configError{fmt.Sprintf("container %q: command or args %v", c.Name, err)}
	}
	if !features.Images {
		// No image to supply an entrypoint: args follow the command.
		cmd, args = append(cmd, args...), nil
	}
	mounts, err := containerMounts(pod, c, paths, imageIDs, lookup, features)
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
		spec.Resources = containerResources(c)
		spec.OOMScoreAdj = lifecycle.OOMScoreAdj(pod, c, w.m.memoryCapacity())
	}
	if features.Security {
		if spec.Security, err = podsecurity.Container(pod, c, w.m.cfg.Security); err != nil {
			return runtime.ContainerSpec{}, configError{fmt.Sprintf("container %q: %v", c.Name, err)}
		}
	}
	return spec, nil
}

// expandAll expands $(VAR) references in each of list, within budget.
func expandAll(list []string, lookup map[string]string, budget *expansion.Budget) ([]string, error) {
	var out []string
	for _, s := range list {
		v, err := budget.Expand(s, lookup)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// containerResources maps limits and requests to cgroup values as the
// kubelet does: memory limit as is, CPU limit as a CFS quota per 100 ms
// (at least 1 ms), CPU request as shares (2 when none, as for BestEffort).
func containerResources(c *v1.Container) runtime.Resources {
	var r runtime.Resources
	if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
		r.MemoryLimitBytes = q.Value()
	}
	if q, ok := c.Resources.Limits[v1.ResourceCPU]; ok && !q.IsZero() {
		const period = 100000
		r.CPUPeriodMicros = period
		r.CPUQuotaMicros = max(q.MilliValue()*period/1000, 1000)
	}
	req := c.Resources.Requests[v1.ResourceCPU]
	r.CPUShares = uint64(min(max(req.MilliValue()*1024/1000, 2), 262144))
	return r
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

// containerUser is the user, group and supplementary groups the container
// runs as (container securityContext over pod's); nil when none is set.
// runAsNonRoot is verifyRunAsNonRoot's, once the image is known.
func containerUser(pod *v1.Pod, c *v1.Container) (*runtime.Credential, error) {
	uid, gid, _ := effectiveIdentity(pod, c)
	psc := pod.Spec.SecurityContext
	var groups []uint32
	if psc != nil {
		for _, g := range psc.SupplementalGroups {
			groups = append(groups, uint32(g))
		}
		if psc.FSGroup != nil {
			groups = append(groups, uint32(*psc.FSGroup))
		}
	}
	strict := psc != nil && psc.SupplementalGroupsPolicy != nil && *psc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict
	if uid == nil && gid == nil && len(groups) == 0 && !strict {
		return nil, nil
	}
	cred := &runtime.Credential{Groups: groups, UIDUnset: uid == nil, GIDUnset: gid == nil,
		StrictGroups: strict}
	if uid != nil {
		cred.UID = uint32(*uid)
	}
	switch {
	case gid != nil:
		cred.GID = uint32(*gid)
	case uid != nil:
		// No image /etc/passwd: the host's says the user's group, else 0 as runc.
		if u, err := user.LookupId(strconv.FormatInt(*uid, 10)); err == nil {
			if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
				cred.GID = uint32(g)
			}
		}
	}
	return cred, nil
}

// containerEnv builds the environment as the kubelet's makeEnvironmentVariables:
// envFrom first, then env in order (a later definition replaces an earlier
// one), each value with $(VAR) expanded against what precedes it and the
// service variables, then the service variables nothing replaced. Every
// value counts against budget: references multiply, and an env the agent
// cannot hold in memory is a config error, not an agent out of memory.
func (m *Manager) containerEnv(ctx context.Context, pod *v1.Pod, c *v1.Container, podIP string, budget *expansion.Budget) ([]string, error) {
	services, err := m.serviceEnv(ctx, pod)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	// scope is what $(VAR) sees: the variables so far over the service variables.
	scope := maps.Clone(services)
	if scope == nil {
		scope = map[string]string{}
	}
	var order []string
	set := func(k, v string) error {
		if err := budget.Charge(len(k) + len(v) + 1); err != nil {
			return configError{fmt.Sprintf("container %q: environment %v", c.Name, err)}
		}
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
		scope[k] = v
		return nil
	}
	for _, from := range c.EnvFrom {
		data, err := m.envFromSource(ctx, pod, from)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := set(from.Prefix+k, data[k]); err != nil {
				return nil, err
			}
		}
	}
	for _, e := range c.Env {
		if e.Value != "" || e.ValueFrom == nil {
			v, err := expansion.Expand(e.Value, scope)
			if err != nil {
				return nil, configError{fmt.Sprintf("container %q: env %s %v", c.Name, e.Name, err)}
			}
			if err := set(e.Name, v); err != nil {
				return nil, err
			}
			continue
		}
		v, ok, err := m.envValueFrom(ctx, pod, c, podIP, e.ValueFrom)
		if err != nil {
			return nil, err
		}
		if ok {
			if err := set(e.Name, v); err != nil {
				return nil, err
			}
		}
	}
	svcKeys := make([]string, 0, len(services))
	for k := range services {
		svcKeys = append(svcKeys, k)
	}
	sort.Strings(svcKeys)
	// What nothing replaced: the service variables, then, for host
	// processes, PATH and HOSTNAME. A runtime with images leaves those to the
	// image and to itself, as under a kubelet: containerd sets HOSTNAME to
	// the pod's hostname, and a PATH set here would replace the image's.
	var defaults [][2]string
	for _, k := range svcKeys {
		defaults = append(defaults, [2]string{k, services[k]})
	}
	if !m.cfg.Runtime.Features().Images {
		host, _ := os.Hostname()
		defaults = append(defaults, [2]string{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, [2]string{"HOSTNAME", host})
	}
	for _, kv := range defaults {
		if _, ok := vars[kv[0]]; !ok {
			if err := set(kv[0], kv[1]); err != nil {
				return nil, err
			}
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

func (m *Manager) envFromSource(ctx context.Context, pod *v1.Pod, from v1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		optional := from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
		cm, err := m.getConfigMap(ctx, pod.UID, pod.Namespace, from.ConfigMapRef.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return nil, nil
			}
			return nil, configError{err.Error()}
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		optional := from.SecretRef.Optional != nil && *from.SecretRef.Optional
		s, err := m.getSecret(ctx, pod.UID, pod.Namespace, from.SecretRef.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return nil, nil
			}
			return nil, configError{err.Error()}
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

// envValueFrom resolves one valueFrom; ok is false for an optional value
// that is absent (the variable is then not set at all, as upstream).
func (m *Manager) envValueFrom(ctx context.Context, pod *v1.Pod, c *v1.Container, podIP string, from *v1.EnvVarSource) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := fieldValue(pod, from.FieldRef.FieldPath, m.cfg.HostIP, podIP)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		var alloc v1.ResourceList
		if m.cfg.Allocatable != nil {
			alloc = m.cfg.Allocatable()
		}
		v, err := resourceValue(pod, c, from.ResourceFieldRef, alloc)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm, err := m.getConfigMap(ctx, pod.UID, pod.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, configError{err.Error()}
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, configError{fmt.Sprintf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)}
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s, err := m.getSecret(ctx, pod.UID, pod.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, configError{err.Error()}
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, configError{fmt.Sprintf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)}
		}
		return string(v), true, nil
	}
	return "", false, configError{"env valueFrom with no source"}
}
