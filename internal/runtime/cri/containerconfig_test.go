package cri

import (
	"slices"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/agent/podsecurity"
	"github.com/podvisor/podvisor/internal/runtime"
)

func webContainer() runtime.ContainerSpec {
	return runtime.ContainerSpec{
		PodUID: "uid-1", PodNamespace: "ns", PodName: "web", Name: "app", Attempt: 3,
		SandboxID:              "sb1",
		Image:                  "docker.io/library/busybox:latest",
		Command:                []string{"/bin/sh", "-c"},
		Args:                   []string{"echo hi"},
		Env:                    []string{"A=1", "B=x=y", "EMPTY="},
		WorkingDir:             "/work",
		LogPath:                "/var/log/pods/ns_web_uid-1/app/3.log",
		TerminationMessagePath: "/dev/termination-log",
		StopSignal:             syscall.SIGUSR1,
		Labels:                 map[string]string{"tier": "front"},
		Mounts:                 []runtime.Mount{{HostPath: "/data/vol", ContainerPath: "/vol", ReadOnly: true}},
		Resources:              runtime.Resources{MemoryLimitBytes: 64 << 20, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000, CPUShares: 512},
		User:                   &runtime.Credential{UID: 1000, GID: 2000, Groups: []uint32{3000, 4000}, StrictGroups: true},
		Security: &runtime.Security{ReadOnlyRootfs: true, NoNewPrivs: true, CapAdd: []string{"NET_ADMIN"}, CapDrop: []string{"ALL"},
			Seccomp: runtime.SecurityProfile{Type: "Localhost", Path: "/data/agent/seccomp/audit.json"}},
	}
}

func TestContainerConfigIsTheKubeletsForTheSpec(t *testing.T) {
	got, err := containerConfig(containerInput{
		spec: webContainer(), sandboxLogDir: "/var/log/pods/ns_web_uid-1", terminationFile: "/state/sb1/app-3-ab",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: "app", Attempt: 3},
		Image:      &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:latest"},
		Command:    []string{"/bin/sh", "-c"},
		Args:       []string{"echo hi"},
		WorkingDir: "/work",
		Envs: []*runtimeapi.KeyValue{
			{Key: "A", Value: []byte("1")}, {Key: "B", Value: []byte("x=y")}, {Key: "EMPTY", Value: []byte("")},
		},
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/vol", HostPath: "/data/vol", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE},
			{ContainerPath: "/dev/termination-log", HostPath: "/state/sb1/app-3-ab"},
		},
		Labels: map[string]string{"tier": "front", "io.kubernetes.container.name": "app",
			"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.uid": "uid-1"},
		Annotations: map[string]string{
			"io.kubernetes.container.restartCount":           "3",
			"io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
			annotationSandboxID:                              "sb1",
			annotationTerminationFile:                        "/state/sb1/app-3-ab",
			annotationStopSignal:                             "10",
		},
		LogPath: "app/3.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 512, MemoryLimitInBytes: 64 << 20},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions:         &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD},
				RunAsUser:                &runtimeapi.Int64Value{Value: 1000},
				RunAsGroup:               &runtimeapi.Int64Value{Value: 2000},
				SupplementalGroups:       []int64{3000, 4000},
				SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict,
				ReadonlyRootfs:           true,
				NoNewPrivs:               true,
				Capabilities:             &runtimeapi.Capability{AddCapabilities: []string{"NET_ADMIN"}, DropCapabilities: []string{"ALL"}},
				Seccomp:                  &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "/data/agent/seccomp/audit.json"},
				MaskedPaths:              podsecurity.MaskedPaths(),
				ReadonlyPaths:            podsecurity.ReadonlyPaths(),
			},
		},
		StopSignal: runtimeapi.Signal_SIGUSR1,
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("config (-want +got):\n%s", d)
	}
}

func TestContainerConfigLeavesWhatTheSpecLeavesToTheImage(t *testing.T) {
	spec := runtime.ContainerSpec{PodUID: "u", PodNamespace: "ns", PodName: "p", Name: "c", SandboxID: "sb",
		Image: "busybox", LogPath: "/logs/c/0.log"}
	got, err := containerConfig(containerInput{spec: spec, sandboxLogDir: "/logs", sandbox: runtime.SandboxSpec{HostNetwork: true}})
	if err != nil {
		t.Fatal(err)
	}
	// Entrypoint, cmd, user and stop signal: the image's, applied by the runtime.
	if got.Command != nil || got.Args != nil || got.Linux.SecurityContext.RunAsUser != nil || got.StopSignal != runtimeapi.Signal_RUNTIME_DEFAULT {
		t.Errorf("config sets what the image should: %v", got)
	}
	if len(got.Mounts) != 0 || got.Annotations[annotationTerminationFile] != "" {
		t.Errorf("a termination file without a termination message path: %v", got.Mounts)
	}
	if got.Linux.SecurityContext.NamespaceOptions.Network != runtimeapi.NamespaceMode_NODE {
		t.Error("a container of a host-network sandbox is not on the node's network")
	}
}

// Supplementary groups alone (fsGroup, supplementalGroups) keep the
// image's user and group; a runAsUser alone keeps the image's group.
func TestContainerConfigKeepsTheImagesUserWhereThePodSetsNone(t *testing.T) {
	spec := runtime.ContainerSpec{PodUID: "u", PodNamespace: "ns", PodName: "p", Name: "c", SandboxID: "sb",
		Image: "busybox", LogPath: "/logs/c/0.log",
		User: &runtime.Credential{Groups: []uint32{4000}, UIDUnset: true, GIDUnset: true}}
	got, err := containerConfig(containerInput{spec: spec, sandboxLogDir: "/logs"})
	if err != nil {
		t.Fatal(err)
	}
	sc := got.Linux.SecurityContext
	if sc.RunAsUser != nil || sc.RunAsGroup != nil || !slices.Equal(sc.SupplementalGroups, []int64{4000}) {
		t.Errorf("groups only: runAsUser %v, runAsGroup %v, groups %v; want the image's user and group, groups [4000]", sc.RunAsUser, sc.RunAsGroup, sc.SupplementalGroups)
	}
	spec.User = &runtime.Credential{UID: 1000, GIDUnset: true}
	if got, err = containerConfig(containerInput{spec: spec, sandboxLogDir: "/logs"}); err != nil {
		t.Fatal(err)
	}
	if sc := got.Linux.SecurityContext; sc.RunAsUser.GetValue() != 1000 || sc.RunAsGroup != nil {
		t.Errorf("runAsUser only: runAsUser %v, runAsGroup %v; want 1000 and the image's group", sc.RunAsUser, sc.RunAsGroup)
	}
}

// An image volume is a CRI mount of the image, read-only, with no host
// path, as the kubelet's makeMounts passes it: containerd refuses anything
// else.
func TestContainerConfigMountsAnImageVolumeAsTheCRIImage(t *testing.T) {
	spec := runtime.ContainerSpec{Name: "c", Image: "busybox", LogPath: "/logs/0.log", Mounts: []runtime.Mount{
		{ContainerPath: "/volume", Image: "sha256:k1773n", ImageName: "registry.k8s.io/e2e-test-images/kitten:1.8", ImageSubPath: "etc"},
	}}
	got, err := containerConfig(containerInput{spec: spec, sandboxLogDir: "/logs"})
	if err != nil {
		t.Fatal(err)
	}
	want := []*runtimeapi.Mount{{
		ContainerPath: "/volume", Readonly: true, Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
		Image:        &runtimeapi.ImageSpec{Image: "sha256:k1773n", UserSpecifiedImage: "registry.k8s.io/e2e-test-images/kitten:1.8"},
		ImageSubPath: "etc",
	}}
	if d := cmp.Diff(want, got.Mounts, protocmp.Transform()); d != "" {
		t.Errorf("mounts (-want +got):\n%s", d)
	}
}

func TestContainerConfigRefusesALogOutsideTheSandboxsLogDirectory(t *testing.T) {
	for _, p := range []string{"", "/elsewhere/0.log", "/logs", "/logs/../x.log", "relative/0.log"} {
		spec := runtime.ContainerSpec{Name: "c", Image: "busybox", LogPath: p}
		if _, err := containerConfig(containerInput{spec: spec, sandboxLogDir: "/logs"}); !runtime.IsInvalid(err) {
			t.Errorf("log path %q: err %v, want ErrInvalid", p, err)
		}
	}
	spec := runtime.ContainerSpec{Name: "c", Image: "busybox", LogPath: "/logs/0.log"}
	if _, err := containerConfig(containerInput{spec: spec}); !runtime.IsInvalid(err) {
		t.Errorf("no sandbox log directory: err %v, want ErrInvalid", err)
	}
	spec.Image = ""
	if _, err := containerConfig(containerInput{spec: spec, sandboxLogDir: "/logs"}); !runtime.IsInvalid(err) {
		t.Errorf("no image: err %v, want ErrInvalid", err)
	}
}

func TestCriSignalNamesSignalsAsTheEnumDoes(t *testing.T) {
	for sig, want := range map[syscall.Signal]runtimeapi.Signal{
		syscall.SIGTERM:  runtimeapi.Signal_SIGTERM,
		syscall.SIGKILL:  runtimeapi.Signal_SIGKILL,
		syscall.SIGQUIT:  runtimeapi.Signal_SIGQUIT,
		syscall.SIGUSR2:  runtimeapi.Signal_SIGUSR2,
		syscall.SIGWINCH: runtimeapi.Signal_SIGWINCH,
		34:               runtimeapi.Signal_SIGRTMIN,
		35:               runtimeapi.Signal_SIGRTMINPLUS1,
		49:               runtimeapi.Signal_SIGRTMINPLUS15,
		50:               runtimeapi.Signal_SIGRTMAXMINUS14,
		63:               runtimeapi.Signal_SIGRTMAXMINUS1,
		64:               runtimeapi.Signal_SIGRTMAX,
	} {
		if got, ok := criSignal(sig); !ok || got != want {
			t.Errorf("criSignal(%d) = %v, %v; want %v", int(sig), got, ok, want)
		}
	}
	for _, sig := range []syscall.Signal{0, 65, 99} {
		if got, ok := criSignal(sig); ok {
			t.Errorf("criSignal(%d) = %v, want none", int(sig), got)
		}
	}
}

func TestContainerConfigRefusesAStopSignalCRICannotName(t *testing.T) {
	spec := runtime.ContainerSpec{Name: "c", Image: "busybox", LogPath: "/logs/0.log", StopSignal: 99}
	if _, err := containerConfig(containerInput{spec: spec, sandboxLogDir: "/logs"}); !runtime.IsInvalid(err) {
		t.Errorf("err %v, want ErrInvalid", err)
	}
}
