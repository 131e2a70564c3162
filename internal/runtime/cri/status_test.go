package cri

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

func criStatus(state runtimeapi.ContainerState, started int64, exit int32, reason, message string) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{
		Id:         "c1",
		Metadata:   &runtimeapi.ContainerMetadata{Name: "app", Attempt: 2},
		State:      state,
		CreatedAt:  100,
		StartedAt:  started,
		FinishedAt: 300,
		ExitCode:   exit,
		Reason:     reason,
		Message:    message,
		LogPath:    "/logs/app/2.log",
		Image:      &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.36"},
		ImageRef:   "docker.io/library/busybox@sha256:b0b0",
		Labels: map[string]string{"tier": "front", "io.kubernetes.container.name": "app",
			"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "ns", "io.kubernetes.pod.uid": "uid-1"},
		Annotations: map[string]string{annotationSandboxID: "sb1", annotationTerminationFile: "/state/sb1/app-2-ab"},
	}
}

func TestContainerStatusOfAnExitedContainer(t *testing.T) {
	got := containerStatus(criStatus(runtimeapi.ContainerState_CONTAINER_EXITED, 200, 3, "Error", ""))
	want := runtime.Status{
		ID: "c1", SandboxID: "sb1", PodUID: "uid-1", PodNamespace: "ns", PodName: "web", Name: "app", Attempt: 2,
		State: runtime.StateExited, CreatedAt: time.Unix(0, 100), StartedAt: time.Unix(0, 200), FinishedAt: time.Unix(0, 300),
		ExitCode: 3, LogPath: "/logs/app/2.log", TerminationMessageFile: "/state/sb1/app-2-ab",
		Labels: map[string]string{"tier": "front"},
		// The kubelet shows the image_ref (a digest when the image has one) as imageID.
		Image: "docker.io/library/busybox:1.36", ImageRef: "docker.io/library/busybox@sha256:b0b0",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
}

func TestContainerStatusReasons(t *testing.T) {
	for _, tc := range []struct {
		name    string
		state   runtimeapi.ContainerState
		started int64
		exit    int32
		reason  string
		want    string
		code    int32
	}{
		{"exit 0 is left to the agent (Completed)", runtimeapi.ContainerState_CONTAINER_EXITED, 200, 0, "Completed", "", 0},
		{"exit 1 is left to the agent (Error)", runtimeapi.ContainerState_CONTAINER_EXITED, 200, 1, "Error", "", 1},
		{"the OOM killer is named", runtimeapi.ContainerState_CONTAINER_EXITED, 200, 137, "OOMKilled", "OOMKilled", 137},
		{"containerd's StartError", runtimeapi.ContainerState_CONTAINER_EXITED, 0, 128, "StartError", "StartError", 128},
		{"Docker's ContainerCannotRun is a StartError", runtimeapi.ContainerState_CONTAINER_EXITED, 0, 128, "ContainerCannotRun", "StartError", 128},
		{"exited without having started is a StartError, exit 128", runtimeapi.ContainerState_CONTAINER_EXITED, 0, 0, "", "StartError", 128},
		{"a running container has no exit", runtimeapi.ContainerState_CONTAINER_RUNNING, 200, 0, "", "", 0},
		{"a created container has no exit", runtimeapi.ContainerState_CONTAINER_CREATED, 0, 0, "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := containerStatus(criStatus(tc.state, tc.started, tc.exit, tc.reason, "msg"))
			if got.Reason != tc.want || got.ExitCode != tc.code {
				t.Errorf("reason %q exit %d, want %q %d", got.Reason, got.ExitCode, tc.want, tc.code)
			}
			if got.Signal != 0 {
				t.Errorf("signal %d: CRI does not say", got.Signal)
			}
		})
	}
}

func TestContainerStatusNeverFinishesBeforeItStarted(t *testing.T) {
	s := criStatus(runtimeapi.ContainerState_CONTAINER_EXITED, 400, 3, "Error", "")
	got := containerStatus(s) // FinishedAt 300: containerd 2 for a command that exits at once
	if !got.StartedAt.Equal(time.Unix(0, 300)) || !got.FinishedAt.Equal(time.Unix(0, 300)) {
		t.Errorf("started %v finished %v, want both the exit time", got.StartedAt, got.FinishedAt)
	}
}

func TestContainerStates(t *testing.T) {
	for in, want := range map[runtimeapi.ContainerState]runtime.State{
		runtimeapi.ContainerState_CONTAINER_CREATED: runtime.StateCreated,
		runtimeapi.ContainerState_CONTAINER_RUNNING: runtime.StateRunning,
		runtimeapi.ContainerState_CONTAINER_EXITED:  runtime.StateExited,
		runtimeapi.ContainerState_CONTAINER_UNKNOWN: runtime.StateUnknown,
	} {
		if got := containerState(in); got != want {
			t.Errorf("%v: %v, want %v", in, got, want)
		}
	}
}
