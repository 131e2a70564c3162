package podworker

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/logs"
	"github.com/podvisor/podvisor/internal/runtime"
)

// Termination messages (docs/lifecycle.md §3), with upstream's limits.
const (
	maxTerminationMessage     = 4096 // bytes of the file, its last ones
	maxTerminationLogLines    = 80   // FallbackToLogsOnError: last lines of the log...
	maxTerminationLogMessage  = 2048 // ...and of those, the last bytes
	terminationMessageReadErr = "Error on reading termination log %s: %v"
)

// terminationMessage is the message of an exited instance, read once: the
// termination message file, or with FallbackToLogsOnError and a non-zero
// exit, the tail of the log when the file is empty. Called with w.mu held.
func (w *worker) terminationMessage(s runtime.Status) string {
	if f := w.factsOf(s.ID); f.messageRead {
		return f.message
	}
	fallback := false
	if c, ok := containerspec.Find(w.pod, s.Name); ok {
		fallback = c.TerminationMessagePolicy == v1.TerminationMessageFallbackToLogsOnError
	}
	msg := readTerminationMessage(s, fallback)
	if msg == "" && fallback && s.ExitCode != 0 && w.m.cfg.Clock.Since(s.FinishedAt) < logSettle {
		// The runtime copies a container's output to its log on its own
		// time: right after the exit, the last lines may not be there yet
		// (seen under load on containerd). Read again shortly, as upstream
		// reads the log at every status it computes.
		w.m.cfg.Clock.AfterFunc(logSettleRetry, w.poke)
		return msg
	}
	f := w.instanceLocked(s.Name, s.ID)
	f.message, f.messageRead = msg, true
	return msg
}

// logSettle is how long after an exit an empty log is read again for a
// FallbackToLogsOnError message, every logSettleRetry.
const (
	logSettle      = 5 * time.Second
	logSettleRetry = 250 * time.Millisecond
)

func readTerminationMessage(s runtime.Status, fallback bool) string {
	fallback = fallback && s.ExitCode != 0
	if s.TerminationMessageFile != "" {
		data, err := readLast(s.TerminationMessageFile, maxTerminationMessage)
		switch {
		case err != nil && !os.IsNotExist(err):
			return fmt.Sprintf(terminationMessageReadErr, s.TerminationMessageFile, err)
		case len(data) > 0:
			return string(data)
		}
	}
	if !fallback || s.LogPath == "" {
		return ""
	}
	return lastOfLog(s.LogPath)
}

// readLast returns the last limit bytes of a file, as upstream's tail.ReadAtMost.
func readLast(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-limit, 0)
	buf := make([]byte, fi.Size()-off)
	n, err := f.ReadAt(buf, off)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return buf[:n], nil
}

// lastOfLog is the content of the last 80 lines of a container log, cut to
// its last 2048 bytes.
func lastOfLog(path string) string {
	tail := int64(maxTerminationLogLines)
	var buf lastBytes
	buf.max = maxTerminationLogMessage
	if err := logs.ReadLogs(context.Background(), path, logs.Options{TailLines: &tail}, &buf); err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	return string(buf.b)
}

// lastBytes keeps the last max bytes written to it.
type lastBytes struct {
	b   []byte
	max int
}

func (l *lastBytes) Write(p []byte) (int, error) {
	l.b = append(l.b, p...)
	if len(l.b) > l.max {
		l.b = append([]byte(nil), l.b[len(l.b)-l.max:]...)
	}
	return len(p), nil
}
