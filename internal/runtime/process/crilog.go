package process

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// maxLogLine is the longest line written as one CRI log entry; longer lines
// are split into partial (P) entries, as containerd's default.
const maxLogLine = 16 * 1024

// criLog writes a container's stdout and stderr to one file in the CRI log
// format, `<RFC3339Nano> <stream> <F|P> <content>`, one entry per write so
// the two streams interleave only at entry boundaries.
type criLog struct {
	path  string
	clock clock.PassiveClock
	mu    sync.Mutex
	f     *os.File // replaced by reopen
	done  bool     // closed: the container exited
}

func openCRILog(path string, clk clock.PassiveClock) (*criLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	return &criLog{path: path, f: f, clock: clk}, nil
}

func (l *criLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
	return l.f.Close()
}

// reopen opens the log's path anew and writes there from now on: the agent
// renamed the file to rotate it. Entries are whole in one file or the
// other, never split, since writes hold mu. On error the old file is kept.
func (l *criLog) reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return errors.New("the container exited")
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	old := l.f
	l.f = f
	return old.Close()
}

func (l *criLog) write(stream string, partial bool, content []byte) {
	tag := " F "
	if partial {
		tag = " P "
	}
	ts := l.clock.Now().Format(time.RFC3339Nano)
	line := make([]byte, 0, len(ts)+len(stream)+len(tag)+len(content)+1)
	line = append(line, ts...)
	line = append(line, ' ')
	line = append(line, stream...)
	line = append(line, tag...)
	line = append(line, content...)
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Write(line) //nolint:errcheck // a full disk must not stop the container
}

// copyStream reads r (stdout or stderr) to EOF and logs it. Lines lose their
// "\n" (and a "\r" before it); a line over maxLogLine becomes P entries then
// an F entry; a last line without newline is written as P, as containerd.
func (l *criLog) copyStream(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLogLine)
	var pending []byte // a "\r" held back: it may precede the "\n"
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			line := append(pending, chunk[:len(chunk)-1]...)
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			l.writeLong(stream, line, false)
			pending = nil
		case errors.Is(err, bufio.ErrBufferFull):
			// Hold back a trailing "\r" in case the next byte is "\n".
			data := append(pending, chunk...)
			pending = nil
			if n := len(data); data[n-1] == '\r' {
				pending = []byte{'\r'}
				data = data[:n-1]
			}
			if len(data) > 0 {
				l.writeLong(stream, data, true)
			}
		default: // EOF or a read error: the stream is over
			if data := append(pending, chunk...); len(data) > 0 {
				l.writeLong(stream, data, true)
			}
			return
		}
	}
}

// writeLong writes data as entries of at most maxLogLine bytes; all but the
// last are partial, the last is partial if the line goes on.
func (l *criLog) writeLong(stream string, data []byte, partial bool) {
	for len(data) > maxLogLine {
		l.write(stream, true, data[:maxLogLine])
		data = data[maxLogLine:]
	}
	l.write(stream, partial, data)
}
