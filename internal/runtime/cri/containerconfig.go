package cri

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/agent/podsecurity"
	"github.com/podvisor/podvisor/internal/runtime"
)

// containerInput is what CreateContainer adds to a ContainerSpec: where its
// sandbox logs, and the host file behind its termination message.
type containerInput struct {
	spec            runtime.ContainerSpec
	sandboxLogDir   string
	sandbox         runtime.SandboxSpec // its namespaces are the container's
	terminationFile string              // empty without a TerminationMessagePath
}

// containerConfig is the ContainerConfig a kubelet would give. Command and
// Args go as given: CRI runtimes apply the image's entrypoint and cmd by
// Kubernetes' rules when they are empty.
func containerConfig(in containerInput) (*runtimeapi.ContainerConfig, error) {
	spec := in.spec
	if spec.Image == "" {
		return nil, fmt.Errorf("container %s: no image: %w", spec.Name, runtime.ErrInvalid)
	}
	logPath, err := relativeLogPath(in.sandboxLogDir, spec.LogPath)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", spec.Name, err)
	}
	labels := withPodLabels(spec.Labels, spec.PodNamespace, spec.PodName, spec.PodUID)
	labels[labelContainerName] = spec.Name
	annotations := map[string]string{
		annotationRestartCount: strconv.Itoa(int(spec.Attempt)),
		annotationSandboxID:    spec.SandboxID,
	}

	cfg := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: spec.Name, Attempt: uint32(spec.Attempt)},
		Image:      &runtimeapi.ImageSpec{Image: spec.Image},
		Command:    spec.Command,
		Args:       spec.Args,
		WorkingDir: spec.WorkingDir,
		Labels:     labels,
		LogPath:    logPath,
		Stdin:      spec.Stdin,
		StdinOnce:  spec.StdinOnce,
		Tty:        spec.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       withOOMScoreAdj(linuxResources(spec.Resources), spec.OOMScoreAdj),
			SecurityContext: containerSecurity(spec.Security, containerNamespaces(in.sandbox, spec.TargetID)),
		},
	}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	for _, m := range spec.Mounts {
		cm := &runtimeapi.Mount{
			ContainerPath: m.ContainerPath,
			HostPath:      m.HostPath,
			Readonly:      m.ReadOnly,
			Propagation:   runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
		}
		if m.Image != "" {
			// containerd mounts the image itself and refuses a host path or
			// a writable image mount.
			cm.HostPath, cm.Readonly = "", true
			cm.Image = &runtimeapi.ImageSpec{Image: m.Image, UserSpecifiedImage: m.ImageName}
			cm.ImageSubPath = m.ImageSubPath
		}
		cfg.Mounts = append(cfg.Mounts, cm)
	}
	if spec.TerminationMessagePath != "" && in.terminationFile != "" {
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{
			ContainerPath: spec.TerminationMessagePath,
			HostPath:      in.terminationFile,
		})
		annotations[annotationTerminationPath] = spec.TerminationMessagePath
		annotations[annotationTerminationFile] = in.terminationFile
	}
	if u := spec.User; u != nil {
		// What the pod leaves unset is the image's (its USER and group).
		sc := cfg.Linux.SecurityContext
		if !u.UIDUnset {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: int64(u.UID)}
		}
		if !u.GIDUnset {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: int64(u.GID)}
		}
		for _, g := range u.Groups {
			sc.SupplementalGroups = append(sc.SupplementalGroups, int64(g))
		}
		if u.StrictGroups {
			sc.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
		}
	}
	if spec.StopSignal != 0 {
		sig, ok := criSignal(spec.StopSignal)
		if !ok {
			return nil, fmt.Errorf("container %s: stop signal %d: %w", spec.Name, int(spec.StopSignal), runtime.ErrInvalid)
		}
		cfg.StopSignal = sig
		annotations[annotationStopSignal] = strconv.Itoa(int(spec.StopSignal))
	}
	cfg.Annotations = annotations
	return cfg, nil
}

// containerNamespaces are the sandbox's, but an ephemeral container with a
// target joins that container's PID namespace.
func containerNamespaces(sb runtime.SandboxSpec, target string) *runtimeapi.NamespaceOption {
	ns := namespaceOptions(sb)
	if target != "" && ns.Pid == runtimeapi.NamespaceMode_CONTAINER {
		ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, target
	}
	return ns
}

// containerSecurity is the LinuxContainerSecurityContext of s (nil: the
// defaults: unprivileged, the kubelet's masked and read-only /proc paths).
func containerSecurity(s *runtime.Security, ns *runtimeapi.NamespaceOption) *runtimeapi.LinuxContainerSecurityContext {
	if s == nil {
		s = &runtime.Security{}
	}
	sc := &runtimeapi.LinuxContainerSecurityContext{
		NamespaceOptions: ns,
		Privileged:       s.Privileged,
		ReadonlyRootfs:   s.ReadOnlyRootfs,
		NoNewPrivs:       s.NoNewPrivs,
		Seccomp:          seccompProfile(s.Seccomp),
		Apparmor:         appArmorProfile(s.AppArmor),
		MaskedPaths:      []string{},
		ReadonlyPaths:    []string{},
	}
	if len(s.CapAdd) > 0 || len(s.CapDrop) > 0 {
		sc.Capabilities = &runtimeapi.Capability{AddCapabilities: s.CapAdd, DropCapabilities: s.CapDrop}
	}
	if !s.UnmaskedProc {
		sc.MaskedPaths, sc.ReadonlyPaths = podsecurity.MaskedPaths(), podsecurity.ReadonlyPaths()
	}
	return sc
}

// appArmorProfile is nil when the pod sets none: the runtime applies its
// default where the host has AppArmor.
func appArmorProfile(p runtime.SecurityProfile) *runtimeapi.SecurityProfile {
	switch p.Type {
	case "":
		return nil
	case "Unconfined":
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
	}
	return seccompProfile(p)
}

func seccompProfile(p runtime.SecurityProfile) *runtimeapi.SecurityProfile {
	switch p.Type {
	case "RuntimeDefault":
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	case "Localhost":
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: p.Path}
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
}

// relativeLogPath is logPath relative to the sandbox's log directory, as
// CRI wants it; a log outside that directory is refused.
func relativeLogPath(dir, logPath string) (string, error) {
	if logPath == "" {
		return "", fmt.Errorf("no log path: %w", runtime.ErrInvalid)
	}
	if dir == "" {
		return "", fmt.Errorf("log path %s: the sandbox has no log directory: %w", logPath, runtime.ErrInvalid)
	}
	rel, err := filepath.Rel(dir, logPath)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || !filepath.IsAbs(logPath) {
		return "", fmt.Errorf("log path %s is not inside the sandbox's log directory %s: %w", logPath, dir, runtime.ErrInvalid)
	}
	return rel, nil
}

func linuxResources(r runtime.Resources) *runtimeapi.LinuxContainerResources {
	return &runtimeapi.LinuxContainerResources{
		MemoryLimitInBytes: r.MemoryLimitBytes,
		CpuQuota:           r.CPUQuotaMicros,
		CpuPeriod:          r.CPUPeriodMicros,
		CpuShares:          int64(r.CPUShares),
	}
}

// withOOMScoreAdj sets the processes' oom_score_adj (at creation only:
// an update leaves it).
func withOOMScoreAdj(r *runtimeapi.LinuxContainerResources, adj int) *runtimeapi.LinuxContainerResources {
	r.OomScoreAdj = int64(adj)
	return r
}

// criSignal names sig as CRI's Signal enum does (alphabetical, not by
// number); false for a signal CRI cannot express.
func criSignal(sig syscall.Signal) (runtimeapi.Signal, bool) {
	name := unix.SignalName(sig)
	if rtmin, rtmax := syscall.Signal(34), syscall.Signal(64); sig >= rtmin && sig <= rtmax {
		switch {
		case sig == rtmin:
			name = "SIGRTMIN"
		case sig == rtmax:
			name = "SIGRTMAX"
		case sig-rtmin <= 15:
			name = fmt.Sprintf("SIGRTMINPLUS%d", sig-rtmin)
		default:
			name = fmt.Sprintf("SIGRTMAXMINUS%d", rtmax-sig)
		}
	}
	v, ok := runtimeapi.Signal_value[name]
	if !ok || name == "" {
		return runtimeapi.Signal_RUNTIME_DEFAULT, false
	}
	return runtimeapi.Signal(v), true
}
