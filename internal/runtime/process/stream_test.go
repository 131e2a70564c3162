package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/utils/exec"

	"github.com/podvisor/podvisor/internal/runtime"
)

func startStreamServer(t *testing.T, r *Runtime) *StreamServer {
	t.Helper()
	s, err := NewStreamServer(r)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

// newExecutor speaks SPDY, as the agent API does to the runtime's URLs
// (it translates WebSocket clients, as the kubelet does).
func newExecutor(u *url.URL) (remotecommand.Executor, error) {
	return remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
}

func TestStreamServerExecReportsOutputAndExitCode(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	s := startStreamServer(t, r)
	id := run(t, r, testSpec(t, "sleep", "30"))
	u, err := s.GetExec(context.Background(), runtime.ExecRequest{ContainerID: id,
		Cmd: []string{"sh", "-c", "cat; echo oops >&2; exit 7"}, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := newExecutor(u)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err = e.StreamWithContext(context.Background(), remotecommand.StreamOptions{
		Stdin: strings.NewReader("from stdin\n"), Stdout: &out, Stderr: &errOut})
	var exit utilexec.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 7 {
		t.Fatalf("got %v, want exit code 7", err)
	}
	if out.String() != "from stdin\n" || errOut.String() != "oops\n" {
		t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
	}
}

func TestStreamServerRefusesExecInAStoppedContainer(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	s := startStreamServer(t, r)
	id := run(t, r, testSpec(t, "true"))
	waitExit(t, r, id)
	if _, err := s.GetExec(context.Background(), runtime.ExecRequest{ContainerID: id, Cmd: []string{"true"}, Stdout: true}); !errors.Is(err, runtime.ErrConflict) {
		t.Errorf("got %v, want runtime.ErrConflict", err)
	}
	if _, err := s.GetExec(context.Background(), runtime.ExecRequest{ContainerID: "nosuch", Cmd: []string{"true"}, Stdout: true}); !isNotFound(err) {
		t.Errorf("got %v, want not found", err)
	}
}

func TestStreamServerAttachIsNotSupported(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	s := startStreamServer(t, r)
	id := run(t, r, testSpec(t, "sleep", "30"))
	if _, err := s.GetAttach(context.Background(), runtime.AttachRequest{ContainerID: id, Stdout: true}); !errors.Is(err, ErrAttachUnsupported) {
		t.Errorf("got %v", err)
	}
}

func TestStreamServerForwardsToTheHostsLoopback(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	s := startStreamServer(t, r)
	run(t, r, testSpec(t, "sleep", "30"))
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go http.Serve(backend, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from the pod") }))
	port := backend.Addr().(*net.TCPAddr).Port

	u, err := s.GetPortForward(context.Background(), runtime.PortForwardRequest{PodUID: "uid-1"})
	if err != nil {
		t.Fatal(err)
	}
	tr, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(spdy.NewDialer(upgrader, &http.Client{Transport: tr}, "POST", u),
		[]string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() { close(stop); <-done }()
	<-ready
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // one connection each
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[0].Local))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hello from the pod" {
			t.Errorf("request %d: body %q", i, body)
		}
	}

	if _, err := s.GetPortForward(context.Background(), runtime.PortForwardRequest{PodUID: "other"}); !isNotFound(err) {
		t.Errorf("pod without containers: got %v, want not found", err)
	}
}

// Clients that go away mid-session leave no process and no goroutine
// behind: the connection's end kills the command.
func TestStreamServerAbandonedSessionsLeaveNothing(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	s := startStreamServer(t, r)
	id := run(t, r, testSpec(t, "sleep", "30"))
	settle := func() int {
		time.Sleep(200 * time.Millisecond)
		return goruntime.NumGoroutine()
	}
	before := settle()
	const sessions = 20
	for i := range sessions {
		u, err := s.GetExec(context.Background(), runtime.ExecRequest{ContainerID: id,
			Cmd: []string{"sh", "-c", "echo $$; exec sleep 300"}, Stdin: true, Stdout: true, TTY: i%2 == 0})
		if err != nil {
			t.Fatal(err)
		}
		e, err := newExecutor(u)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		pids := make(chan int, 1)
		out := pidWriter(pids)
		stdin, hold := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: out, Tty: i%2 == 0})
		}()
		var pid int
		select {
		case pid = <-pids:
		case <-time.After(waitLimit):
			t.Fatalf("session %d: no pid", i)
		}
		cancel()
		<-done
		hold.Close()
		eventually(t, fmt.Sprintf("session %d's command to be killed", i), func() bool { return !alive(pid) })
	}
	var after int
	eventually(t, "goroutines back to where they were", func() bool {
		after = settle()
		return after <= before+2
	})
	t.Logf("goroutines: %d before, %d after %d abandoned sessions", before, after, sessions)
}
