package podworker

import (
	"os"

	"github.com/podvisor/podvisor/internal/runtime"
)

// terminationMessage reads the container's termination message file once.
func (w *worker) terminationMessage(s runtime.Status) string {
	if msg, ok := w.messages[s.ID]; ok {
		return msg
	}
	msg := ""
	if s.TerminationMessageFile != "" {
		if f, err := os.Open(s.TerminationMessageFile); err == nil {
			buf := make([]byte, 4096)
			n, _ := f.Read(buf)
			f.Close()
			msg = string(buf[:n])
		}
	}
	w.messages[s.ID] = msg
	return msg
}
