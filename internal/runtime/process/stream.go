package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/podvisor/podvisor/internal/agent/disconnect"
	"github.com/podvisor/podvisor/internal/runtime"
)

// StreamServer serves the runtime's exec and port-forward sessions with
// upstream's CRI streaming server (SPDY and WebSocket), on a random loopback
// port, as containerd does: the agent API proxies clients to its URLs.
type StreamServer struct {
	r   *Runtime
	srv streaming.Server
	ln  net.Listener
}

var _ runtime.Streamer = (*StreamServer)(nil)

// NewStreamServer binds the loopback port; sessions are served once Run runs.
func NewStreamServer(r *Runtime) (*StreamServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("process runtime: streaming server: %w", err)
	}
	cfg := streaming.DefaultConfig
	cfg.Addr = ln.Addr().String()
	cfg.BaseURL = &url.URL{Scheme: "http", Host: cfg.Addr, Path: "/"}
	srv, err := streaming.NewServer(cfg, sessions{r})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("process runtime: streaming server: %w", err)
	}
	return &StreamServer{r: r, srv: srv, ln: disconnect.Listener(ln)}, nil
}

// Run serves until ctx ends, then closes every session: their commands are
// killed.
func (s *StreamServer) Run(ctx context.Context) error {
	hs := &http.Server{
		Handler:           s.srv,
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext:       disconnect.ConnContext,
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(s.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("process runtime: streaming server: %w", err)
	case <-ctx.Done():
		hs.Close()
		<-served
		return nil
	}
}

// GetExec checks that the container runs and returns the URL of the session.
func (s *StreamServer) GetExec(ctx context.Context, req runtime.ExecRequest) (*url.URL, error) {
	if err := s.checkRunning(ctx, req.ContainerID); err != nil {
		return nil, err
	}
	resp, err := s.srv.GetExec(&runtimeapi.ExecRequest{
		ContainerId: req.ContainerID, Cmd: req.Cmd,
		Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Tty: req.TTY,
	})
	if err != nil {
		return nil, err
	}
	return url.Parse(resp.Url)
}

// GetAttach checks that the container runs and returns the URL of the session.
func (s *StreamServer) GetAttach(ctx context.Context, req runtime.AttachRequest) (*url.URL, error) {
	if err := s.checkRunning(ctx, req.ContainerID); err != nil {
		return nil, err
	}
	resp, err := s.srv.GetAttach(&runtimeapi.AttachRequest{
		ContainerId: req.ContainerID, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Tty: req.TTY,
	})
	if err != nil {
		return nil, err
	}
	return url.Parse(resp.Url)
}

// GetPortForward returns the URL of a session forwarding to ports of the
// host's loopback: a process runtime pod has the host's network.
func (s *StreamServer) GetPortForward(ctx context.Context, req runtime.PortForwardRequest) (*url.URL, error) {
	list, err := s.r.List(ctx)
	if err != nil {
		return nil, err
	}
	running := false
	for _, st := range list {
		running = running || (st.PodUID == req.PodUID && st.State == runtime.StateRunning)
	}
	if !running {
		return nil, fmt.Errorf("pod %s has no running container: %w", req.PodUID, runtime.ErrNotFound)
	}
	resp, err := s.srv.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: req.PodUID, Port: req.Ports})
	if err != nil {
		return nil, err
	}
	return url.Parse(resp.Url)
}

func (s *StreamServer) checkRunning(ctx context.Context, id string) error {
	st, err := s.r.Status(ctx, id)
	if err != nil {
		return err
	}
	if st.State != runtime.StateRunning {
		return fmt.Errorf("container %s is %s: %w", id, st.State, runtime.ErrConflict)
	}
	return nil
}

// sessions is the streaming server's view of the runtime.
type sessions struct{ r *Runtime }

var _ streaming.Runtime = sessions{}

func (s sessions) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	sess := Session{TTY: tty, Resize: resize}
	// Streams not requested arrive as nil interfaces.
	if in != nil {
		sess.Stdin = in
	}
	if out != nil {
		sess.Stdout = out
	}
	if errOut != nil {
		sess.Stderr = errOut
	}
	code, err := s.r.ExecSession(ctx, id, cmd, sess)
	if err != nil {
		return err
	}
	if code != 0 {
		// The client reads the code from this error: "command terminated with exit code N".
		return utilexec.CodeExitError{Err: fmt.Errorf("error executing command %v, exit code %d", cmd, code), Code: code}
	}
	return nil
}

// Attach relays the session to the container's shim, which holds its stdin
// and output (attach.go).
func (s sessions) Attach(ctx context.Context, id string, in io.Reader, out, errOut io.WriteCloser, _ bool, resize <-chan remotecommand.TerminalSize) error {
	// Streams not requested arrive as nil interfaces.
	var sin io.Reader
	var sout, serr io.Writer
	if in != nil {
		sin = in
	}
	if out != nil {
		sout = out
	}
	if errOut != nil {
		serr = errOut
	}
	err := attach(ctx, filepath.Join(s.r.root, id), sin, sout, serr, resize)
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("container %s is not running: %w", id, runtime.ErrConflict)
	}
	return err
}

// portForwardGrace is how long the other direction may go on once one ended,
// as containerd (and socat) allow.
const portForwardGrace = time.Second

// PortForward copies between stream and a connection to port on the host's
// loopback (podUID is the pod the agent checked) until both directions end.
func (s sessions) PortForward(ctx context.Context, podUID string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("localhost", strconv.Itoa(int(port))))
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d of pod %s: %w", port, podUID, err)
	}
	defer conn.Close()
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(conn, stream)
		// The client finished sending: the server sees end of input and may still answer.
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- err
	}()
	go func() {
		_, err := io.Copy(stream, conn)
		done <- err
	}()
	var first error
	select {
	case first = <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	timer := s.r.clock.NewTimer(portForwardGrace)
	defer timer.Stop()
	select {
	case err := <-done:
		return errors.Join(first, err)
	case <-timer.C():
		// conn is closed on return, which ends the copy still running.
		return first
	case <-ctx.Done():
		return ctx.Err()
	}
}
