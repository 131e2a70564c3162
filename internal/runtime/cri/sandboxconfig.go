package cri

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// sandboxConfig is the PodSandboxConfig a kubelet would give for spec. It
// is a function of spec alone, so that it can be rebuilt from the spec
// recorded in the sandbox's annotation after an agent restart.
func sandboxConfig(spec runtime.SandboxSpec) (*runtimeapi.PodSandboxConfig, error) {
	if spec.PodUID == "" || spec.PodName == "" || spec.PodNamespace == "" {
		return nil, fmt.Errorf("sandbox of %s/%s (uid %q): pod name, namespace and UID are required: %w",
			spec.PodNamespace, spec.PodName, spec.PodUID, runtime.ErrInvalid)
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("sandbox of %s/%s: %w", spec.PodNamespace, spec.PodName, err)
	}
	labels := withPodLabels(spec.Labels, spec.PodNamespace, spec.PodName, spec.PodUID)
	annotations := maps.Clone(spec.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[annotationSandboxSpec] = string(specJSON)

	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: spec.PodName, Namespace: spec.PodNamespace, Uid: spec.PodUID, Attempt: uint32(spec.Attempt),
		},
		LogDirectory: spec.LogDir,
		Labels:       labels,
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: spec.CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: namespaceOptions(spec),
				Privileged:       spec.Privileged,
				Seccomp:          seccompProfile(spec.Seccomp),
			},
			Sysctls: maps.Clone(spec.Sysctls),
		},
	}
	if !spec.HostNetwork {
		cfg.Hostname = spec.Hostname // on the host network the pod has the node's
	}
	if d := spec.DNS; d != nil {
		cfg.DnsConfig = &runtimeapi.DNSConfig{Servers: d.Servers, Searches: d.Searches, Options: d.Options}
	}
	for _, p := range spec.Ports {
		cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
			Protocol:      protocol(p.Protocol),
			ContainerPort: p.ContainerPort,
			HostPort:      p.HostPort,
			HostIp:        p.HostIP,
		})
	}
	return cfg, nil
}

// namespaceOptions are a kubelet's: the pod's own network, IPC and UTS
// namespaces unless it asks for the node's (hostNetwork, hostIPC), one PID
// namespace per container unless shareProcessNamespace (one per pod) or
// hostPID (the node's). Containers get the same options as their sandbox.
func namespaceOptions(spec runtime.SandboxSpec) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case spec.SharePID:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

func protocol(p string) runtimeapi.Protocol {
	switch p {
	case "UDP":
		return runtimeapi.Protocol_UDP
	case "SCTP":
		return runtimeapi.Protocol_SCTP
	}
	return runtimeapi.Protocol_TCP
}

// specOf returns the SandboxSpec recorded in a sandbox's annotations; false
// when the sandbox was not made by podvisor.
func specOf(annotations map[string]string) (runtime.SandboxSpec, bool) {
	var spec runtime.SandboxSpec
	s, ok := annotations[annotationSandboxSpec]
	if !ok || json.Unmarshal([]byte(s), &spec) != nil {
		return spec, false
	}
	return spec, true
}

// sandboxStatus maps a CRI sandbox status; hostIPs are the node's, a
// host-network sandbox's IPs.
func sandboxStatus(s *runtimeapi.PodSandboxStatus, hostIPs []string) runtime.SandboxStatus {
	st := runtime.SandboxStatus{
		ID:        s.GetId(),
		State:     sandboxState(s.GetState()),
		CreatedAt: fromNanos(s.GetCreatedAt()),
		Labels:    userLabels(s.GetLabels()),
	}
	if m := s.GetMetadata(); m != nil {
		st.PodUID, st.PodNamespace, st.PodName, st.Attempt = m.Uid, m.Namespace, m.Name, int32(m.Attempt)
	}
	st.HostNetwork = s.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
	if st.HostNetwork {
		st.IPs = hostIPs
		return st
	}
	if ip := s.GetNetwork().GetIp(); ip != "" {
		st.IPs = append(st.IPs, ip)
	}
	for _, ip := range s.GetNetwork().GetAdditionalIps() {
		if ip.GetIp() != "" {
			st.IPs = append(st.IPs, ip.GetIp())
		}
	}
	return st
}

func sandboxState(s runtimeapi.PodSandboxState) runtime.SandboxState {
	switch s {
	case runtimeapi.PodSandboxState_SANDBOX_READY:
		return runtime.SandboxReady
	case runtimeapi.PodSandboxState_SANDBOX_NOTREADY:
		return runtime.SandboxNotReady
	}
	return runtime.SandboxUnknown
}

// withPodLabels is a copy of labels with the pod's identity labels.
func withPodLabels(labels map[string]string, namespace, name, uid string) map[string]string {
	out := maps.Clone(labels)
	if out == nil {
		out = map[string]string{}
	}
	out[labelPodName] = name
	out[labelPodNamespace] = namespace
	out[labelPodUID] = uid
	return out
}

// userLabels are labels less the ones a kubelet adds: what the spec gave.
func userLabels(labels map[string]string) map[string]string {
	out := maps.Clone(labels)
	for _, k := range []string{labelPodName, labelPodNamespace, labelPodUID, labelContainerName} {
		delete(out, k)
	}
	return out
}

// fromNanos converts CRI's Unix nanoseconds, 0 meaning never.
func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}
