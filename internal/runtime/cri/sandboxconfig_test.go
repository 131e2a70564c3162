package cri

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

func podSandboxSpec() runtime.SandboxSpec {
	return runtime.SandboxSpec{
		PodUID: "uid-1", PodNamespace: "ns", PodName: "web", Attempt: 2,
		Hostname:     "web",
		LogDir:       "/var/log/pods/ns_web_uid-1",
		Labels:       map[string]string{"app": "web"},
		Annotations:  map[string]string{"note": "x"},
		DNS:          &runtime.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"ns.svc.cluster.local"}, Options: []string{"ndots:5"}},
		Ports:        []runtime.PortMapping{{Protocol: "UDP", ContainerPort: 53, HostPort: 5353, HostIP: "127.0.0.1"}, {ContainerPort: 80, HostPort: 8080}},
		CgroupParent: "/kubepods/besteffort/poduid-1",
		SharePID:     true, HostIPC: true, Privileged: true,
		Sysctls: map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"},
		Seccomp: runtime.SecurityProfile{Type: "RuntimeDefault"},
	}
}

func TestSandboxConfigIsTheKubeletsForAPodNetworkPod(t *testing.T) {
	spec := podSandboxSpec()
	got, err := sandboxConfig(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1", Attempt: 2},
		Hostname:     "web",
		LogDirectory: "/var/log/pods/ns_web_uid-1",
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"ns.svc.cluster.local"}, Options: []string{"ndots:5"}},
		PortMappings: []*runtimeapi.PortMapping{
			{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353, HostIp: "127.0.0.1"},
			{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080},
		},
		Labels: map[string]string{"app": "web",
			"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.uid": "uid-1"},
		Annotations: map[string]string{"note": "x", annotationSandboxSpec: got.Annotations[annotationSandboxSpec]},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: "/kubepods/besteffort/poduid-1",
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_NODE,
			}, Privileged: true, Seccomp: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}},
			Sysctls: map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"},
		},
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("config (-want +got):\n%s", d)
	}
	if spec.Labels["io.kubernetes.pod.uid"] != "" {
		t.Error("the spec's labels were modified")
	}
	back, ok := specOf(got.Annotations)
	if !ok || !cmp.Equal(back, spec) {
		t.Errorf("the spec is not recoverable from the annotation: %v %v", ok, cmp.Diff(spec, back))
	}
}

func TestSandboxConfigOnTheHostNetworkHasTheNodesNamespaceAndHostname(t *testing.T) {
	spec := podSandboxSpec()
	spec.HostNetwork = true
	got, err := sandboxConfig(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hostname != "" {
		t.Errorf("hostname %q: a host-network pod has the node's", got.Hostname)
	}
	if n := got.Linux.SecurityContext.NamespaceOptions.Network; n != runtimeapi.NamespaceMode_NODE {
		t.Errorf("network namespace %v, want NODE", n)
	}
}

func TestSandboxConfigRefusesAPodWithoutIdentity(t *testing.T) {
	for _, spec := range []runtime.SandboxSpec{
		{PodNamespace: "ns", PodName: "a"},
		{PodUID: "u", PodNamespace: "ns"},
		{PodUID: "u", PodName: "a"},
	} {
		if _, err := sandboxConfig(spec); !runtime.IsInvalid(err) {
			t.Errorf("%+v: err %v, want ErrInvalid", spec, err)
		}
	}
}

func TestSandboxStatusHasThePodIPsPrimaryFirst(t *testing.T) {
	created := time.Unix(1700000000, 5)
	got := sandboxStatus(&runtimeapi.PodSandboxStatus{
		Id:        "sb1",
		Metadata:  &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "uid-1", Attempt: 1},
		State:     runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt: created.UnixNano(),
		Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.88.0.5",
			AdditionalIps: []*runtimeapi.PodIP{{Ip: "fd00::5"}}},
		Linux:  &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{}}},
		Labels: map[string]string{"app": "web", "io.kubernetes.pod.uid": "uid-1"},
	}, []string{"192.168.1.2"})
	want := runtime.SandboxStatus{
		ID: "sb1", PodUID: "uid-1", PodNamespace: "ns", PodName: "web", Attempt: 1,
		State: runtime.SandboxReady, CreatedAt: created, IPs: []string{"10.88.0.5", "fd00::5"},
		Labels: map[string]string{"app": "web"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
}

func TestSandboxStatusOnTheHostNetworkHasTheNodesIPs(t *testing.T) {
	got := sandboxStatus(&runtimeapi.PodSandboxStatus{
		Id:    "sb1",
		State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}},
	}, []string{"192.168.1.2"})
	if !got.HostNetwork || got.State != runtime.SandboxNotReady || !cmp.Equal(got.IPs, []string{"192.168.1.2"}) {
		t.Errorf("got %+v", got)
	}
}
