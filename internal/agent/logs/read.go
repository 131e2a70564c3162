package logs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// Options select what ReadLogs writes, with the meaning of v1.PodLogOptions.
type Options struct {
	// Follow keeps reading lines as they are appended, until ctx is cancelled
	// or Exited reports true and the file is drained.
	Follow bool
	// Exited reports whether the container instance writing the log has
	// exited; nil means never, so following stops only with ctx.
	Exited func() bool
	// Timestamps prefixes each line with its TimestampFormat timestamp and a space.
	Timestamps bool
	// TailLines, when non-nil and not negative, starts at the last N lines.
	TailLines *int64
	// SinceTime and SinceSeconds drop lines older than the later of the two bounds.
	SinceTime    time.Time
	SinceSeconds *int64
	// LimitBytes, when non-nil, stops after that many bytes of output
	// (timestamps included), the last line cut short.
	LimitBytes *int64
	// Stream is Stdout, Stderr, or "" for both, interleaved in file order.
	Stream string

	// Clock gives "now" for SinceSeconds and paces follow's polling; nil is the real clock.
	Clock clock.Clock
	// PollInterval is how often follow looks for new data; zero means 100ms.
	PollInterval time.Duration
}

// FromPodLogOptions converts the API's options; the caller adds Exited.
func FromPodLogOptions(o *v1.PodLogOptions) Options {
	opts := Options{
		Follow:       o.Follow,
		Timestamps:   o.Timestamps,
		TailLines:    o.TailLines,
		SinceSeconds: o.SinceSeconds,
		LimitBytes:   o.LimitBytes,
	}
	if o.SinceTime != nil {
		opts.SinceTime = o.SinceTime.Time
	}
	if o.Stream != nil {
		switch *o.Stream {
		case v1.LogStreamStdout:
			opts.Stream = Stdout
		case v1.LogStreamStderr:
			opts.Stream = Stderr
		}
	}
	return opts
}

const defaultPollInterval = 100 * time.Millisecond

// errLimit stops reading once LimitBytes have been written.
var errLimit = errors.New("byte limit reached")

// ReadLogs writes the content of the CRI log at path to stdout as opts selects:
// each line's content followed by '\n', fragments of partial lines joined,
// a partial line at the end of the log left without '\n'. Malformed lines
// are skipped. With Follow it returns ctx.Err() when ctx is cancelled; it
// returns nil when the log is complete (or LimitBytes is reached), and the
// first error opening or reading the file or writing to stdout otherwise.
func ReadLogs(ctx context.Context, path string, opts Options, stdout io.Writer) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = defaultPollInterval
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	r := &reader{opts: opts, path: path, f: f, out: stdout, since: opts.SinceTime}
	defer func() { r.f.Close() }()

	if opts.SinceSeconds != nil {
		if s := opts.Clock.Now().Add(-time.Duration(*opts.SinceSeconds) * time.Second); s.After(r.since) {
			r.since = s
		}
	}
	if opts.LimitBytes != nil {
		r.out = &limitWriter{w: stdout, n: *opts.LimitBytes}
	}
	if opts.TailLines != nil && *opts.TailLines >= 0 {
		if *opts.TailLines == 0 && !opts.Follow {
			return nil
		}
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		start, err := tailOffset(f, fi.Size(), *opts.TailLines, opts.Stream)
		if err != nil {
			return fmt.Errorf("find tail of %s: %w", path, err)
		}
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			return err
		}
	}
	err = r.run(ctx)
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

// reader carries the state of one ReadLogs call.
type reader struct {
	opts  Options
	path  string
	f     *os.File // the log; replaced when it is rotated
	out   io.Writer
	since time.Time
	// per stream: whether its last entry was partial, and whether the line it
	// is in is being dropped (too old or not the selected stream)
	mid, drop [2]bool
	buf       []byte
}

// run reads r.f from its offset to the end, then, if following, waits for more.
func (r *reader) run(ctx context.Context) error {
	br := bufio.NewReaderSize(r.f, 64<<10)
	var pending []byte // a line read in pieces: longer than the buffer, or not yet ended
	exited, rotated := false, false
	for n := 0; ; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		b, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			line := b[:len(b)-1]
			if len(pending) > 0 {
				pending = append(pending, line...)
				line = pending
			}
			if err := r.emit(line); err != nil {
				return err
			}
			pending = pending[:0]
			continue
		case errors.Is(err, bufio.ErrBufferFull):
			pending = append(pending, b...)
			continue
		case !errors.Is(err, io.EOF):
			return err
		}
		pending = append(pending, b...)

		// At the end of the file.
		if !r.opts.Follow || exited {
			return r.emit(pending)
		}
		if rotated {
			// The old file is drained; continue with the new one from its start.
			nf, err := os.Open(r.path)
			if err != nil {
				return err
			}
			r.f.Close()
			r.f, rotated = nf, false
			br.Reset(r.f)
			if err := r.emit(pending); err != nil {
				return err
			}
			pending = pending[:0]
			continue
		}
		// Seen exited, the file is read once more so that nothing written
		// before the exit is lost; the same for a rotation.
		if r.opts.Exited != nil && r.opts.Exited() {
			exited = true
			continue
		}
		if replaced(r.f, r.path) {
			rotated = true
			continue
		}
		t := r.opts.Clock.NewTimer(r.opts.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	}
}

// replaced reports whether path now names another file than f (the log was
// rotated). A missing path is not a rotation: the old file is still read.
func replaced(f *os.File, path string) bool {
	cur, err := f.Stat()
	if err != nil {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && !os.SameFile(cur, fi)
}

// emit writes the content of one log line as the options select.
func (r *reader) emit(line []byte) error {
	if len(line) == 0 {
		return nil
	}
	e, ok := parseEntry(line)
	if !ok {
		return nil
	}
	i := 0
	if e.stream == Stderr {
		i = 1
	}
	if !r.mid[i] {
		// The first fragment of a line decides for the whole line.
		r.drop[i] = e.ts.Before(r.since) || (r.opts.Stream != "" && r.opts.Stream != e.stream)
	}
	first := !r.mid[i]
	r.mid[i] = e.partial
	if r.drop[i] {
		return nil
	}
	r.buf = r.buf[:0]
	if first && r.opts.Timestamps {
		r.buf = e.ts.AppendFormat(r.buf, TimestampFormat)
		r.buf = append(r.buf, ' ')
	}
	r.buf = append(r.buf, e.content...)
	if !e.partial {
		r.buf = append(r.buf, '\n')
	}
	_, err := r.out.Write(r.buf)
	return err
}

// limitWriter passes on at most n bytes, then fails with errLimit.
type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errLimit
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.w.Write(p)
	l.n -= int64(n)
	if err == nil && l.n <= 0 {
		err = errLimit
	}
	return n, err
}
