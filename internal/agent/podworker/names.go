package podworker

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/podnames"
	"github.com/podvisor/podvisor/internal/runtime"
)

// podDNS is the resolv.conf of the pod's sandbox (podnames.PodDNS), from
// the node's resolvConf read now; its warnings become events.
func (m *Manager) podDNS(pod *v1.Pod) (*runtime.DNSConfig, error) {
	cfg := podnames.DNSConfig{ClusterDNS: m.cfg.DNS.ClusterDNS, ClusterDomain: m.cfg.DNS.ClusterDomain,
		HostUnset: m.cfg.DNS.ResolvConf == "", NodeIPs: []string{m.cfg.HostIP}}
	if !cfg.HostUnset {
		data, err := os.ReadFile(m.cfg.DNS.ResolvConf)
		if err != nil {
			return nil, err
		}
		if cfg.Host, err = podnames.ParseResolvConf(string(data)); err != nil {
			return nil, fmt.Errorf("Encountered error while parsing resolv conf file. Error: %w", err)
		}
	}
	r, events := podnames.PodDNS(pod, cfg)
	for _, e := range events {
		if e.OnNode {
			continue // the node's own event would repeat for every pod
		}
		m.cfg.Recorder.Event(pod, v1.EventTypeWarning, e.Reason, e.Message)
	}
	return &runtime.DNSConfig{Servers: r.Servers, Searches: r.Searches, Options: r.Options}, nil
}

// etcHostsMount is the managed /etc/hosts of a container on a runtime with
// pod networks (written into the pod directory, as the kubelet's
// etc-hosts), unless the container mounts its own; ok is false when it gets
// none (the process runtime: containers see the node's).
func (w *worker) etcHostsMount(pod *v1.Pod, c *v1.Container, podIP string) (m runtime.Mount, ok bool, err error) {
	if !w.m.cfg.Runtime.Features.PodNetwork || podnames.MountsOwnEtcHosts(c) || (podIP == "" && !pod.Spec.HostNetwork) {
		return m, false, nil
	}
	var content []byte
	if pod.Spec.HostNetwork {
		node, err := os.ReadFile(podnames.EtcHosts)
		if err != nil {
			return m, false, err
		}
		content = podnames.HostNetworkHostsFile(node, pod.Spec.HostAliases)
	} else {
		host, domain, err := podnames.HostnameAndDomain(pod, w.m.cfg.DNS.ClusterDomain)
		if err != nil {
			return m, false, err
		}
		content = podnames.HostsFile([]string{podIP}, host, domain, pod.Spec.HostAliases)
	}
	// Written in place, not renamed over: running containers bind-mount
	// this inode.
	dir := w.podDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return m, false, err
	}
	path := filepath.Join(dir, "etc-hosts")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return m, false, err
	}
	return runtime.Mount{HostPath: path, ContainerPath: podnames.EtcHosts}, true, nil
}
