package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// maxOutput bounds the output kept from a probe, as upstream (10 KiB).
const maxOutput = 10 << 10

// execTimeoutSlack lets the ExecFunc enforce the timeout itself; the context
// deadline is only a backstop.
const execTimeoutSlack = 2 * time.Second

// execAction runs a command in the container: success is exit code 0.
type execAction struct {
	exec        ExecFunc
	containerID string
	cmd         []string
	timeout     time.Duration
}

func (a *execAction) run(ctx context.Context) outcome {
	ctx, cancel := context.WithTimeout(ctx, a.timeout+execTimeoutSlack)
	defer cancel()
	out, code, err := a.exec(ctx, a.containerID, a.cmd, a.timeout)
	if len(out) > maxOutput {
		out = out[:maxOutput]
	}
	switch {
	case err != nil && isTimeout(err):
		// A timeout is a failure, exec included (§6); the text is upstream's.
		return outcome{result: resultFailure, output: fmt.Sprintf("command %q timed out", strings.Join(a.cmd, " "))}
	case err != nil:
		return outcome{result: resultUnknown, err: err}
	case code == 0:
		return outcome{result: resultSuccess, output: string(out)}
	default:
		return outcome{result: resultFailure, output: string(out)}
	}
}

func isTimeout(err error) bool {
	if runtime.IsTimeout(err) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
