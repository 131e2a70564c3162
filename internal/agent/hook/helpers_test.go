package hook

import (
	"context"
	"errors"
	"os/exec"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testPod() *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"}}
}

// execCall is what the runner passed to the ExecFunc.
type execCall struct {
	containerID string
	cmd         []string
	timeout     time.Duration
}

// localExec is an ExecFunc running cmd as a host process, as the process
// runtime does, and recording its calls and when each returned.
type localExec struct {
	mu       sync.Mutex
	calls    []execCall
	returned chan error // one per call, after the process is gone
}

func newLocalExec() *localExec { return &localExec{returned: make(chan error, 10)} }

func (l *localExec) Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, int, error) {
	l.mu.Lock()
	l.calls = append(l.calls, execCall{id, cmd, timeout})
	l.mu.Unlock()
	out, code, err := runLocal(ctx, cmd, timeout)
	l.returned <- err
	return out, code, err
}

func (l *localExec) call(t *testing.T) execCall {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) != 1 {
		t.Fatalf("exec called %d times, want 1", len(l.calls))
	}
	return l.calls[0]
}

func runLocal(ctx context.Context, cmd []string, timeout time.Duration) ([]byte, int, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.WaitDelay = time.Second
	out, err := c.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return out, -1, ctx.Err()
	case errors.As(err, &exit):
		return out, exit.ExitCode(), nil
	case err != nil:
		return out, -1, err
	}
	return out, 0, nil
}

type runResult struct {
	msg string
	err error
	at  time.Time
}

// runAsync runs a hook in the background so a test can wait on it with a deadline.
func runAsync(ctx context.Context, r *Runner, kind Kind, c *v1.Container, podIP string, h *v1.LifecycleHandler, budget time.Duration) <-chan runResult {
	ch := make(chan runResult, 1)
	go func() {
		msg, err := r.Run(ctx, kind, testPod(), c, "cid", podIP, h, budget)
		ch <- runResult{msg, err, time.Now()}
	}()
	return ch
}

func await(t *testing.T, ch <-chan runResult, within time.Duration) runResult {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(within):
		t.Fatalf("hook still running after %v", within)
	}
	return runResult{}
}

func notYet(t *testing.T, ch <-chan runResult, what string) {
	t.Helper()
	select {
	case res := <-ch:
		t.Fatalf("hook returned %s: %q, %v", what, res.msg, res.err)
	case <-time.After(50 * time.Millisecond):
	}
}
