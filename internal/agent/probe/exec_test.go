package probe

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// hostExec runs probe commands as host processes, as the process runtime does.
func hostExec(ctx context.Context, _ string, cmd []string, timeout time.Duration) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out, -1, runtime.ErrTimeout
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return out, exitErr.ExitCode(), nil
	}
	if err != nil {
		return out, -1, err
	}
	return out, 0, nil
}

func runExec(t *testing.T, cmd []string, timeout time.Duration) outcome {
	t.Helper()
	p := &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}}
	tm := timingOf(liveness, p)
	if timeout > 0 {
		tm.timeout = timeout
	}
	e := testEnv()
	e.exec = hostExec
	return runWithRetries(context.Background(), newAction(e, tm, p, &v1.Container{Name: "app"}, "id", ""))
}

func TestExecWithRealProcesses(t *testing.T) {
	if o := runExec(t, []string{"true"}, 0); o.result != resultSuccess {
		t.Errorf("true: %+v", o)
	}
	if o := runExec(t, []string{"sh", "-c", "echo not ready; exit 3"}, 0); o.result != resultFailure || o.output != "not ready\n" {
		t.Errorf("exit 3: %+v", o)
	}
	if o := runExec(t, []string{"no-such-command-podvisor"}, 0); o.result != resultUnknown || o.err == nil {
		t.Errorf("not found: %+v", o)
	}
	begin := time.Now()
	if o := runExec(t, []string{"sleep", "30"}, 200*time.Millisecond); o.result != resultFailure || o.output != `command "sleep 30" timed out` {
		t.Errorf("timeout: %+v", o)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}
