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
	"os"
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

func attachTo(t *testing.T, s *StreamServer, id string, opts remotecommand.StreamOptions) error {
	t.Helper()
	u, err := s.GetAttach(context.Background(), runtime.AttachRequest{ContainerID: id,
		Stdin: opts.Stdin != nil, Stdout: opts.Stdout != nil, Stderr: opts.Stderr != nil, TTY: opts.Tty})
	if err != nil {
		t.Fatal(err)
	}
	e, err := newExecutor(u)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.StreamWithContext(ctx, opts)
}

// stdinOnce without a terminal: the end of the session's stdin is the end
// of the container's, and the session goes on until the container exits.
func TestStreamServerAttachStdinOnce(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	s := startStreamServer(t, r)
	spec := testSpec(t, "sh", "-c", "read line; echo got:$line; cat; echo eof >&2; exit 3")
	spec.Stdin, spec.StdinOnce = true, true
	id := run(t, r, spec)
	var out, errOut bytes.Buffer
	if err := attachTo(t, s, id, remotecommand.StreamOptions{Stdin: strings.NewReader("one\ntwo\n"), Stdout: &out, Stderr: &errOut}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "got:one\ntwo\n" || errOut.String() != "eof\n" {
		t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
	}
	if st := waitExit(t, r, id); st.ExitCode != 3 {
		t.Errorf("exit code %d, want 3: stdin was closed, the container ended", st.ExitCode)
	}
	// The log has what the session saw.
	b, err := os.ReadFile(spec.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if !strings.Contains(log, " stdout F got:one\n") || !strings.Contains(log, " stderr F eof\n") {
		t.Errorf("log:\n%s", log)
	}
	// The socket went with the container.
	if _, err := s.GetAttach(context.Background(), runtime.AttachRequest{ContainerID: id, Stdout: true}); !errors.Is(err, runtime.ErrConflict) {
		t.Errorf("attach to an exited container: %v, want runtime.ErrConflict", err)
	}
}

// Without stdinOnce, the end of a session's stdin ends that session only:
// the container keeps its stdin for the next one.
func TestStreamServerAttachStdinStaysOpen(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	s := startStreamServer(t, r)
	spec := testSpec(t, "sh", "-c", "while read line; do echo got:$line; done; echo bye")
	spec.Stdin = true
	id := run(t, r, spec)
	for _, word := range []string{"first", "second"} {
		out := &syncBuffer{}
		pr, pw := io.Pipe()
		go func() {
			io.WriteString(pw, word+"\n")
			// Close stdin once the answer came back, so the session ends.
			for i := 0; i < 500 && !strings.Contains(out.String(), "got:"+word); i++ {
				time.Sleep(10 * time.Millisecond)
			}
			pw.Close()
		}()
		if err := attachTo(t, s, id, remotecommand.StreamOptions{Stdin: pr, Stdout: out}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "got:"+word) {
			t.Errorf("session %s: stdout %q", word, out.String())
		}
		if st, err := r.Status(context.Background(), id); err != nil || st.State != runtime.StateRunning {
			t.Fatalf("after session %s: %+v %v, want still running with its stdin open", word, st, err)
		}
	}
}

// With a terminal: one output, the process's controlling terminal (so its
// size follows the client's), and output sessions side by side.
func TestStreamServerAttachTerminal(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	s := startStreamServer(t, r)
	// It says "sized" once the client's size reached its terminal.
	spec := testSpec(t, "sh", "-c", `until [ "$(stty size)" = "45 123" ]; do sleep 0.05; done; echo sized; read line; echo got:$line >&2; read line`)
	spec.Stdin, spec.StdinOnce, spec.TTY = true, true, true
	id := run(t, r, spec)

	// A watcher without stdin sees the same output.
	watched := &syncBuffer{}
	watching := make(chan error, 1)
	go func() { watching <- attachTo(t, s, id, remotecommand.StreamOptions{Stdout: watched, Tty: true}) }()

	sizes := make(sizeQueue, 1)
	sizes <- &remotecommand.TerminalSize{Width: 123, Height: 45}
	pr, pw := io.Pipe()
	out := &syncBuffer{}
	waitOut := func(s string) {
		for i := 0; i < 1000 && !strings.Contains(out.String(), s); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	go func() {
		waitOut("sized")
		io.WriteString(pw, "hello\n")
		waitOut("got:hello")
		io.WriteString(pw, "\n") // the second read: the container exits
		close(sizes)
	}()
	if err := attachTo(t, s, id, remotecommand.StreamOptions{Stdin: pr, Stdout: out, Tty: true, TerminalSizeQueue: sizes}); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	got := out.String()
	if !strings.Contains(got, "sized\r\n") || !strings.Contains(got, "got:hello\r\n") {
		t.Errorf("terminal output %q, want sized (the client's size) and got:hello (stderr on the terminal)", got)
	}
	if !strings.Contains(got, "hello\r\n") {
		t.Errorf("terminal output %q: the terminal did not echo the input", got)
	}
	if err := <-watching; err != nil {
		t.Fatal(err)
	}
	if w := watched.String(); !strings.Contains(w, "got:hello") {
		t.Errorf("the watching session saw %q", w)
	}
	waitExit(t, r, id)
}

// The shim outlives the agent: a runtime opened again on the same root (an
// agent restart) attaches to a container it re-adopted.
func TestStreamServerAttachAfterAgentRestart(t *testing.T) {
	root := t.TempDir()
	r := newRuntime(t, root)
	spec := testSpec(t, "sh", "-c", "while read line; do echo got:$line; done")
	spec.Stdin, spec.StdinOnce = true, true
	id := run(t, r, spec)
	r.Close()
	r2 := newRuntime(t, root)
	s := startStreamServer(t, r2)
	var out bytes.Buffer
	if err := attachTo(t, s, id, remotecommand.StreamOptions{Stdin: strings.NewReader("again\n"), Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "got:again\n" {
		t.Errorf("stdout %q", out.String())
	}
	if st := waitExit(t, r2, id); st.ExitCode != 0 {
		t.Errorf("exit %d", st.ExitCode)
	}
}

type sizeQueue chan *remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize { return <-q }

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
