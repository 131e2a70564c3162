package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	criclient "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Exec runs cmd in the container with CRI's ExecSync, its output buffered
// by the runtime. The timeout is rounded up to whole seconds (CRI's unit);
// 0 means none. The exit code is the command's; a timeout is -1 and
// ErrTimeout; exec in a container that is not running is ErrConflict.
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string, stdout, stderr io.Writer, timeout time.Duration) (int, error) {
	if len(cmd) == 0 {
		return -1, fmt.Errorf("exec in container %s: no command: %w", id, runtime.ErrInvalid)
	}
	secs := (timeout + time.Second - 1) / time.Second
	out, errOut, err := r.rs.ExecSync(quiet(ctx), id, cmd, secs*time.Second)
	if stdout != nil {
		stdout.Write(out)
	}
	if stderr != nil {
		stderr.Write(errOut)
	}
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.ExitStatus(), nil
	case errors.Is(err, criclient.ErrCommandTimedOut):
		return -1, fmt.Errorf("exec %q in container %s: timed out after %v: %w", cmd[0], id, timeout, runtime.ErrTimeout)
	}
	err = classify(err, "exec %q in container %s", cmd[0], id)
	if !runtime.IsNotFound(err) && !runtime.IsUnavailable(err) {
		// Runtimes answer Unknown for a container that is not running.
		if st, serr := r.Status(ctx, id); serr == nil && st.State != runtime.StateRunning {
			return -1, fmt.Errorf("exec in container %s: it is %s: %w", id, st.State, runtime.ErrConflict)
		}
	}
	return -1, err
}
