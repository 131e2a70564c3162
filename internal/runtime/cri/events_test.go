package cri

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// fakeCRI is the least of a CRI runtime that the event tests need: it
// keeps sandboxes and containers in memory, and its event stream stays open
// and sends what the test puts in events.
type fakeCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
	events chan *runtimeapi.ContainerEventResponse
	sock   string

	mu         sync.Mutex
	sandboxes  map[string]*runtimeapi.PodSandboxStatus
	containers map[string]*runtimeapi.ContainerStatus
}

func (f *fakeCRI) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "v1.0", RuntimeApiVersion: "v1"}, nil
}

// ImageFsInfo is what the CRI client calls to check the image service.
func (f *fakeCRI) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (f *fakeCRI) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("sandbox%d", len(f.sandboxes))
	f.sandboxes[id] = &runtimeapi.PodSandboxStatus{Id: id, Metadata: req.Config.Metadata, State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Labels: req.Config.Labels, Annotations: req.Config.Annotations}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (f *fakeCRI) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[req.PodSandboxId]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such sandbox")
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: s}, nil
}

func (f *fakeCRI) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("container%d", len(f.containers))
	f.containers[id] = &runtimeapi.ContainerStatus{Id: id, Metadata: req.Config.Metadata, State: runtimeapi.ContainerState_CONTAINER_CREATED,
		CreatedAt: time.Now().UnixNano(), Labels: req.Config.Labels, Annotations: req.Config.Annotations,
		Image: &runtimeapi.ImageSpec{Image: req.Config.GetImage().GetImage()}, ImageRef: req.Config.GetImage().GetImage()}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (f *fakeCRI) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[req.ContainerId].State = runtimeapi.ContainerState_CONTAINER_RUNNING
	f.containers[req.ContainerId].StartedAt = time.Now().UnixNano()
	return &runtimeapi.StartContainerResponse{}, nil
}

func (f *fakeCRI) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[req.ContainerId]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such container")
	}
	return &runtimeapi.ContainerStatusResponse{Status: c}, nil
}

func (f *fakeCRI) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.containers, req.ContainerId)
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (f *fakeCRI) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.Container
	for _, c := range f.containers {
		out = append(out, &runtimeapi.Container{Id: c.Id, Metadata: c.Metadata, State: c.State, Labels: c.Labels, Annotations: c.Annotations})
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (f *fakeCRI) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for _, s := range f.sandboxes {
		out = append(out, &runtimeapi.PodSandbox{Id: s.Id, Metadata: s.Metadata, State: s.State, Labels: s.Labels, Annotations: s.Annotations})
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

// sandboxDiesInFake makes sandbox id NotReady in the fake, without any
// event, and returns its status.
func sandboxDiesInFake(f *fakeCRI, id string) *runtimeapi.PodSandboxStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sandboxes[id]
	s.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	return s
}

func (f *fakeCRI) GetContainerEvents(_ *runtimeapi.GetEventsRequest, srv runtimeapi.RuntimeService_GetContainerEventsServer) error {
	for {
		select {
		case ev := <-f.events:
			if err := srv.Send(ev); err != nil {
				return err
			}
		case <-srv.Context().Done():
			return nil
		}
	}
}

// fakeRuntime serves a fakeCRI and returns a Runtime on it.
func fakeRuntime(t *testing.T, relist time.Duration) (*Runtime, *fakeCRI) {
	t.Helper()
	f := &fakeCRI{events: make(chan *runtimeapi.ContainerEventResponse),
		sandboxes: map[string]*runtimeapi.PodSandboxStatus{}, containers: map[string]*runtimeapi.ContainerStatus{}}
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	runtimeapi.RegisterImageServiceServer(srv, f)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	f.sock = sock
	return connectFake(t, f, relist, t.TempDir()), f
}

// connectFake is a Runtime on f's socket keeping its state in stateDir.
func connectFake(t *testing.T, f *fakeCRI, relist time.Duration, stateDir string, set ...func(*Config)) *Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := Config{Endpoint: f.sock, StateDir: stateDir, RelistPeriod: relist, Log: slog.New(slog.DiscardHandler)}
	for _, s := range set {
		s(&cfg)
	}
	r, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// fakeContainer runs a sandbox and a started container in the fake.
func fakeContainer(t *testing.T, r *Runtime) string {
	t.Helper()
	ctx := testCtx(t)
	logs := t.TempDir()
	sb, err := r.RunSandbox(ctx, runtime.SandboxSpec{PodUID: "u1", PodNamespace: "ns", PodName: "p", LogDir: logs})
	if err != nil {
		t.Fatal(err)
	}
	id, err := r.Create(ctx, runtime.ContainerSpec{PodUID: "u1", PodNamespace: "ns", PodName: "p", Name: "c",
		SandboxID: sb, Image: "busybox", LogPath: filepath.Join(logs, "c", "0.log")})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if ev := <-r.Events(); ev.ID != id || ev.State != runtime.StateRunning {
		t.Fatalf("event %+v, want %s running", ev, id)
	}
	return id
}

// exitInFake makes container id exit in the fake, without any event.
func exitInFake(f *fakeCRI, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[id]
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	c.FinishedAt = time.Now().UnixNano()
	c.ExitCode = 3
}

func TestAnExitTheStreamMissesIsFoundByTheRelist(t *testing.T) {
	r, f := fakeRuntime(t, 100*time.Millisecond)
	id := fakeContainer(t, r)
	exitInFake(f, id) // the stream is open and says nothing
	waitEvent(t, r, id, runtime.StateExited, 5*time.Second)
}

func TestAStreamEventReportsAnExitBeforeAnyRelist(t *testing.T) {
	r, f := fakeRuntime(t, time.Hour)
	id := fakeContainer(t, r)
	exitInFake(f, id)
	sent := time.Now()
	f.events <- &runtimeapi.ContainerEventResponse{
		ContainerId:        id,
		ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
		PodSandboxStatus:   &runtimeapi.PodSandboxStatus{Id: "sandbox"},
	}
	ev := waitEvent(t, r, id, runtime.StateExited, 5*time.Second)
	if ev.PodUID != "u1" || ev.Name != "c" {
		t.Errorf("event %+v does not name the container", ev)
	}
	t.Logf("stream event → runtime event: %v", time.Since(sent))
	// The sandbox's own events are not containers'.
	f.events <- &runtimeapi.ContainerEventResponse{
		ContainerId:        "sandbox",
		ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
		PodSandboxStatus:   &runtimeapi.PodSandboxStatus{Id: "sandbox"},
	}
	select {
	case ev := <-r.Events():
		t.Errorf("unexpected event %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

// A sandbox that stops behind the agent's back is an event, from the
// runtime's stream or, if the stream misses it, from the relist; the
// agent's own stop is not told twice.
func TestADeadSandboxIsAnEvent(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			relist := time.Hour
			if !stream {
				relist = 100 * time.Millisecond
			}
			r, f := fakeRuntime(t, relist)
			fakeContainer(t, r)
			sb := "sandbox0" // the fake names sandboxes in order
			st := sandboxDiesInFake(f, sb)
			if stream {
				f.events <- &runtimeapi.ContainerEventResponse{ContainerId: sb,
					ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, PodSandboxStatus: st}
			}
			ev := waitEvent(t, r, sb, runtime.StateExited, 5*time.Second)
			if !ev.Sandbox || ev.PodUID != "u1" {
				t.Fatalf("event %+v, want the sandbox of pod u1", ev)
			}
			if stream {
				r.relistNow() // sees it again: no second event
			}
			select {
			case ev := <-r.Events():
				t.Errorf("unexpected event %+v", ev)
			case <-time.After(300 * time.Millisecond):
			}
		})
	}
}
