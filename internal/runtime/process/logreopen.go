package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// reopenTimeout bounds the exchange with a shim when ctx has no deadline:
// a shim that does not answer must not hold up the rotation of other logs.
const reopenTimeout = 10 * time.Second

// ReopenContainerLog asks the instance's shim, which writes the log, to open
// its log path anew (after the agent renamed the file), on the shim's
// attach socket; it returns once the shim did.
func (r *Runtime) ReopenContainerLog(ctx context.Context, id string) error {
	d, err := r.dir(id)
	if err != nil {
		return err
	}
	st, err := d.readState()
	if err != nil {
		return fmt.Errorf("reopen log of container %s: %w", id, err)
	}
	if st.state() != runtime.StateRunning {
		return fmt.Errorf("reopen log of container %s: it is %s, not running: %w", id, st.state(), runtime.ErrConflict)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, reopenTimeout)
		defer cancel()
	}
	if err := askReopen(ctx, string(d)); err != nil {
		return fmt.Errorf("reopen log of container %s: %w", id, err)
	}
	return nil
}

// askReopen sends frameReopenLog to the shim serving dir and reads its answer.
func askReopen(ctx context.Context, dir string) error {
	var conn net.Conn
	err := shortPath(dir, attachSocket, func(p string) error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "unix", p)
		return err
	})
	if err != nil {
		return fmt.Errorf("shim not reachable: %w: %w", err, runtime.ErrUnavailable)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if err := writeFrame(conn, frame{kind: frameReopenLog}); err != nil {
		return err
	}
	answer, err := readFrame(bufio.NewReader(conn))
	switch {
	case errors.Is(err, io.EOF):
		// A shim of an older podvisor closes a connection it does not understand.
		return fmt.Errorf("the shim does not reopen logs (started by an older podvisor?): %w", runtime.ErrInvalid)
	case err != nil:
		return fmt.Errorf("no answer from the shim: %w", err)
	case answer.kind != frameReopenLog:
		return fmt.Errorf("unexpected answer %q from the shim", answer.kind)
	case len(answer.data) > 0:
		return fmt.Errorf("shim: %s", answer.data)
	}
	return nil
}

// serveReopenLog is the shim's side of askReopen.
func (h *attachHub) serveReopenLog(conn net.Conn) {
	defer conn.Close()
	var answer []byte
	if err := h.reopenLog(); err != nil {
		h.log.Warn("container log not reopened", "err", err)
		answer = []byte(err.Error())
	} else {
		h.log.Debug("container log reopened")
	}
	writeFrame(conn, frame{kind: frameReopenLog, data: answer}) //nolint:errcheck // the agent sees a missing answer
}
