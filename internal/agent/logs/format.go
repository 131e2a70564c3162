// Package logs reads and writes container logs in the CRI log format: one
// entry per line, "<RFC3339Nano timestamp> <stdout|stderr> <F|P> <content>",
// where P marks a fragment continued by the stream's next entry and F ends a line.
package logs

import (
	"bytes"
	"io"
	"time"

	"k8s.io/utils/clock"
)

// Streams of a container log.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// TimestampFormat is how Timestamps prefixes lines: RFC3339Nano with a fixed
// nine-digit fraction, as the kubelet prints it for kubectl logs --timestamps.
const TimestampFormat = "2006-01-02T15:04:05.000000000Z07:00"

// entry is one parsed line of a CRI log file. content aliases the line.
type entry struct {
	ts      time.Time
	stream  string
	partial bool
	content []byte
}

// parseEntry parses one line (without its '\n'). ok is false for anything
// that is not a CRI log entry.
func parseEntry(line []byte) (e entry, ok bool) {
	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return e, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return e, false
	}
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return e, false
	}
	switch string(stream) {
	case Stdout:
		e.stream = Stdout
	case Stderr:
		e.stream = Stderr
	default:
		return e, false
	}
	// Tags are ':'-separated (CRI); the first says whether the line is full.
	// A line with an empty content may lack the space after the tags.
	tags, content, _ := bytes.Cut(rest, []byte{' '})
	tag, _, _ := bytes.Cut(tags, []byte{':'})
	switch string(tag) {
	case "F":
	case "P":
		e.partial = true
	default:
		return e, false
	}
	e.ts, e.content = t, content
	return e, true
}

// NewWriter returns a writer that appends what is written to it to w as CRI
// log entries of stream, timestamped by clk: an F entry per complete line and
// a P entry for a trailing incomplete one. Each Write makes one Write on w.
func NewWriter(w io.Writer, stream string, clk clock.PassiveClock) io.Writer {
	return &writer{w: w, stream: stream, clk: clk}
}

type writer struct {
	w      io.Writer
	stream string
	clk    clock.PassiveClock
}

func (cw *writer) Write(p []byte) (int, error) {
	prefix := cw.clk.Now().UTC().Format(time.RFC3339Nano) + " " + cw.stream + " "
	var buf bytes.Buffer
	for rest := p; len(rest) > 0; {
		line, after, full := bytes.Cut(rest, []byte{'\n'})
		buf.WriteString(prefix)
		if full {
			buf.WriteString("F ")
		} else {
			buf.WriteString("P ")
		}
		buf.Write(line)
		buf.WriteByte('\n')
		rest = after
	}
	if _, err := cw.w.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}
