package process

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/podvisor/podvisor/internal/runtime"
)

func TestExecSessionFeedsStdinUntilItsEnd(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "30"))
	var out, errOut bytes.Buffer
	code, err := r.ExecSession(context.Background(), id, []string{"sh", "-c", "cat; echo done >&2; exit 3"},
		Session{Stdin: strings.NewReader("line 1\nline 2\n"), Stdout: &out, Stderr: &errOut})
	if err != nil || code != 3 {
		t.Fatalf("exit %d, %v; want 3", code, err)
	}
	if out.String() != "line 1\nline 2\n" || errOut.String() != "done\n" {
		t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
	}
}

// A client that keeps stdin open does not keep the session going once the
// command exited.
func TestExecSessionEndsWithTheCommandWhileStdinIsOpen(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "30"))
	stdin, hold := io.Pipe()
	defer hold.Close()
	begin := time.Now()
	code, err := r.ExecSession(context.Background(), id, []string{"true"}, Session{Stdin: stdin})
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v", code, err)
	}
	if d := time.Since(begin); d > 500*time.Millisecond {
		t.Errorf("returned after %v", d)
	}
}

func TestExecSessionOfMissingCommandFailsBeforeStarting(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "30"))
	code, err := r.ExecSession(context.Background(), id, []string{"nosuchcmd"}, Session{})
	if err == nil || code != -1 || !strings.Contains(err.Error(), `"nosuchcmd": executable file not found in $PATH`) {
		t.Fatalf("got exit %d, %v", code, err)
	}
}

func TestExecSessionInExitedContainerIsAConflict(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "true"))
	waitExit(t, r, id)
	if _, err := r.ExecSession(context.Background(), id, []string{"true"}, Session{}); !errors.Is(err, runtime.ErrConflict) {
		t.Fatalf("got %v, want runtime.ErrConflict", err)
	}
}

// The client going away (ctx) kills what the session started, and the
// session returns at once.
func TestExecSessionIsKilledWhenItsContextEnds(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "30"))
	ctx, cancel := context.WithCancel(context.Background())
	pids := make(chan int, 1)
	out := pidWriter(pids)
	done := make(chan error, 1)
	go func() {
		_, err := r.ExecSession(ctx, id, []string{"sh", "-c", "sleep 300 & echo $!; wait"}, Session{Stdout: out})
		done <- err
	}()
	var pid int
	select {
	case pid = <-pids:
	case <-time.After(waitLimit):
		t.Fatal("no pid printed")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("session did not end with its context")
	}
	eventually(t, "the session's background process to die", func() bool { return !alive(pid) })
}

// On a terminal the command's stdin is a tty that is its controlling
// terminal, and a resize reaches it.
func TestExecSessionOnATerminalFollowsResizes(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "30"))
	stdin, input := io.Pipe()
	resize := make(chan remotecommand.TerminalSize)
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		code, err := r.ExecSession(context.Background(), id,
			[]string{"sh", "-c", `[ -t 0 ] && echo is-a-tty; read x; stty size; read x; stty size; exit 5`},
			Session{Stdin: stdin, Stdout: &out, TTY: true, Resize: resize})
		if err == nil && code != 5 {
			err = errors.New("exit code " + strconv.Itoa(code))
		}
		done <- err
	}()
	// A second send returns only once the first was applied.
	for _, size := range []remotecommand.TerminalSize{{Width: 100, Height: 40}, {Width: 100, Height: 40}} {
		resize <- size
	}
	io.WriteString(input, "go\n")
	eventually(t, "the first size", func() bool { return strings.Contains(out.String(), "40 100") })
	for _, size := range []remotecommand.TerminalSize{{Width: 132, Height: 50}, {Width: 132, Height: 50}} {
		resize <- size
	}
	io.WriteString(input, "go\n")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("session did not end; output %q", out.String())
	}
	got := out.String()
	// The terminal echoes input and ends lines with CR LF.
	for _, want := range []string{"is-a-tty\r\n", "40 100\r\n", "50 132\r\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output %q lacks %q", got, want)
		}
	}
}

// Everything a command printed on its terminal reaches the client, also
// when it exits right after printing.
func TestExecSessionOnATerminalDeliversTheLastOutput(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "30"))
	var out syncBuffer
	code, err := r.ExecSession(context.Background(), id, []string{"sh", "-c", "seq 1 2000"}, Session{Stdout: &out, TTY: true})
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v", code, err)
	}
	if !strings.HasSuffix(out.String(), "\r\n2000\r\n") {
		t.Errorf("output ends with %q", tail(out.String(), 40))
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// pidWriter sends each number written to it (a pid the command prints) on.
type pidWriter chan<- int

func (w pidWriter) Write(p []byte) (int, error) {
	if pid, err := strconv.Atoi(strings.TrimSpace(string(p))); err == nil {
		w <- pid
	}
	return len(p), nil
}

// syncBuffer is written by the session while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
