package process

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// Attach on the process runtime. The shim owns the main process's stdin (a
// pipe, or the master of its pseudo-terminal with TTY) and its output, and
// outlives the agent; so the shim serves attach sessions itself, on a unix
// socket in the instance directory (attachSocket). The agent's streaming
// server relays a client's session to it (sessions.Attach).
//
// On the socket, each side sends frames: one byte of kind, four of length
// (big endian), the payload. The client starts with a hello; then it sends
// stdin, the end of stdin and terminal sizes, the shim sends stdout and
// stderr. The shim closes the connection when the session ends: the
// container exited (after its last output), or the client's stdin ended on
// a container without stdinOnce, or the client was too slow to take the
// output.
//
// Semantics are containerd's (its CRI ContainerIO.Attach): output goes to
// every session that asked for it; the end of a session's stdin closes the
// container's stdin if the container has stdinOnce and no TTY, and otherwise
// ends that session.

const attachSocket = "attach.sock"

const (
	frameHello       byte = 'h' // payload: stdin, stdout, stderr flags (0 or 1)
	frameStdin       byte = 'i'
	frameStdinClosed byte = 'c'
	frameResize      byte = 'r' // payload: width, height (uint16 each)
	frameStdout      byte = 'o'
	frameStderr      byte = 'e'
	// frameReopenLog, instead of a hello, asks the shim to reopen the
	// container's log file (log rotation); the shim answers with one frame
	// of the same kind, empty on success, else the error's text, and
	// closes the connection.
	frameReopenLog byte = 'l'

	maxFrame = 1 << 20
	// sessionBuffer is how many output chunks a session may fall behind
	// before it is dropped: a stalled client must not stall the container,
	// whose output also goes to its log.
	sessionBuffer = 1024
)

type frame struct {
	kind byte
	data []byte
}

func writeFrame(w io.Writer, f frame) error {
	buf := make([]byte, 5+len(f.data))
	buf[0] = f.kind
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(f.data)))
	copy(buf[5:], f.data)
	_, err := w.Write(buf)
	return err
}

func readFrame(r *bufio.Reader) (frame, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return frame{}, fmt.Errorf("attach: frame of %d bytes", n)
	}
	f := frame{kind: hdr[0], data: make([]byte, n)}
	_, err := io.ReadFull(r, f.data)
	return f, err
}

// shortPath calls fn with a path to name in dir that fits a unix socket
// address (108 bytes), however long dir is: through /proc/self/fd.
func shortPath(dir, name string, fn func(path string) error) error {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	return fn(fmt.Sprintf("/proc/self/fd/%d/%s", fd, name))
}

// attachHub is the shim's side: the container's stdin and the sessions
// attached to its output.
type attachHub struct {
	log       *slog.Logger
	ln        net.Listener
	path      string
	tty       *os.File // the terminal's master; nil without TTY
	stdinOnce bool
	reopenLog func() error

	stdinMu sync.Mutex // serialises writes to stdin and its closing
	stdin   io.WriteCloser

	mu       sync.Mutex
	sessions map[*attachSession]bool
	closed   bool
	serving  sync.WaitGroup
}

type attachSession struct {
	conn           net.Conn
	out            chan frame
	stdout, stderr bool
	ended          bool // out is closed; guarded by the hub's mu
}

// listenAttach starts serving sessions on dir/attach.sock. stdin is the
// container's stdin (nil: it has none), tty its terminal's master (nil:
// none); reopenLog serves frameReopenLog.
func listenAttach(dir string, stdin io.WriteCloser, tty *os.File, stdinOnce bool, reopenLog func() error, log *slog.Logger) (*attachHub, error) {
	path := filepath.Join(dir, attachSocket)
	os.Remove(path)
	var ln net.Listener
	err := shortPath(dir, attachSocket, func(p string) error {
		var err error
		ln, err = net.Listen("unix", p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach socket: %w", err)
	}
	// Unlinking is ours (the short path would not name the file later).
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	h := &attachHub{log: log, ln: ln, path: path, tty: tty, stdinOnce: stdinOnce, stdin: stdin, reopenLog: reopenLog, sessions: map[*attachSession]bool{}}
	h.serving.Go(h.accept)
	return h, nil
}

func (h *attachHub) accept() {
	for {
		conn, err := h.ln.Accept()
		if err != nil {
			return
		}
		go h.serve(conn)
	}
}

// output returns the writer that copies kind (stdout or stderr) to the
// sessions that asked for it, without ever blocking the container.
func (h *attachHub) output(kind byte) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		h.broadcast(frame{kind: kind, data: append([]byte(nil), p...)})
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (h *attachHub) broadcast(f frame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.sessions {
		// With a terminal there is only stdout; a client that asked for
		// stderr alone gets it there, as a terminal has one output.
		want := s.stdout || h.tty != nil && s.stderr
		if f.kind == frameStderr {
			want = s.stderr
		}
		if !want {
			continue
		}
		select {
		case s.out <- f:
		default:
			h.log.Warn("attach session dropped: the client does not keep up with the output")
			h.endLocked(s)
		}
	}
}

// endLocked ends s: its writer sends what is queued and closes the connection.
func (h *attachHub) endLocked(s *attachSession) {
	if !s.ended {
		s.ended = true
		close(s.out)
		delete(h.sessions, s)
	}
}

func (h *attachHub) end(s *attachSession) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endLocked(s)
}

func (h *attachHub) serve(conn net.Conn) {
	r := bufio.NewReader(conn)
	hello, err := readFrame(r)
	if err == nil && hello.kind == frameReopenLog {
		h.serveReopenLog(conn)
		return
	}
	if err != nil || hello.kind != frameHello || len(hello.data) != 3 {
		conn.Close()
		return
	}
	wantStdin := hello.data[0] == 1
	s := &attachSession{conn: conn, out: make(chan frame, sessionBuffer), stdout: hello.data[1] == 1, stderr: hello.data[2] == 1}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		conn.Close()
		return
	}
	h.sessions[s] = true
	h.mu.Unlock()

	go func() {
		defer conn.Close()
		for f := range s.out {
			if writeFrame(conn, f) != nil {
				h.end(s)
				for range s.out { // drain until ended
				}
				return
			}
		}
	}()

	for {
		f, err := readFrame(r)
		if err != nil || f.kind == frameStdinClosed {
			// The client's stdin ended (or the client went away).
			if wantStdin && h.stdinOnce && h.tty == nil {
				h.closeStdin()
				if err == nil {
					continue // output goes on until the container exits
				}
			}
			h.end(s)
			return
		}
		switch f.kind {
		case frameStdin:
			if wantStdin {
				h.writeStdin(f.data)
			}
		case frameResize:
			if h.tty != nil && len(f.data) == 4 {
				size := remotecommand.TerminalSize{Width: binary.BigEndian.Uint16(f.data), Height: binary.BigEndian.Uint16(f.data[2:])}
				if err := setTerminalSize(h.tty, size); err != nil {
					h.log.Debug("attach: resizing the terminal", "err", err)
				}
			}
		}
	}
}

func (h *attachHub) writeStdin(p []byte) {
	h.stdinMu.Lock()
	defer h.stdinMu.Unlock()
	if h.stdin == nil {
		return
	}
	if _, err := h.stdin.Write(p); err != nil {
		h.log.Debug("attach: writing stdin", "err", err)
	}
}

// closeStdin gives the container the end of its input, once.
func (h *attachHub) closeStdin() {
	h.stdinMu.Lock()
	defer h.stdinMu.Unlock()
	if h.stdin != nil {
		h.stdin.Close()
		h.stdin = nil
	}
}

// close ends every session (after the output queued for it) and stops
// listening: the container has exited and its output is drained.
func (h *attachHub) close() {
	h.mu.Lock()
	h.closed = true
	for s := range h.sessions {
		h.endLocked(s)
	}
	h.mu.Unlock()
	h.ln.Close()
	h.serving.Wait()
	os.Remove(h.path)
	h.closeStdin()
}

// attach is the agent's side: it relays one client's session to the shim of
// the container in dir until the session ends or ctx does.
func attach(ctx context.Context, dir string, in io.Reader, out, errOut io.Writer, resize <-chan remotecommand.TerminalSize) error {
	var conn net.Conn
	err := shortPath(dir, attachSocket, func(p string) error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "unix", p)
		return err
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	var wmu sync.Mutex
	send := func(f frame) error {
		wmu.Lock()
		defer wmu.Unlock()
		return writeFrame(conn, f)
	}
	flag := func(b bool) byte {
		if b {
			return 1
		}
		return 0
	}
	if err := send(frame{kind: frameHello, data: []byte{flag(in != nil), flag(out != nil), flag(errOut != nil)}}); err != nil {
		return err
	}
	stop := make(chan struct{})
	defer close(stop)
	if in != nil {
		go func() {
			buf := make([]byte, 32*1024)
			for {
				n, err := in.Read(buf)
				if n > 0 && send(frame{kind: frameStdin, data: buf[:n]}) != nil {
					return
				}
				if err != nil {
					send(frame{kind: frameStdinClosed}) //nolint:errcheck // the session may be over
					return
				}
			}
		}()
	}
	if resize != nil {
		go func() {
			for {
				select {
				case <-stop:
					return
				case size, ok := <-resize:
					if !ok {
						return
					}
					data := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, size.Width), size.Height)
					if send(frame{kind: frameResize, data: data}) != nil {
						return
					}
				}
			}
		}()
	}
	go func() {
		select {
		case <-ctx.Done():
			conn.Close()
		case <-stop:
		}
	}()
	r := bufio.NewReader(conn)
	for {
		f, err := readFrame(r)
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		w := out
		if f.kind == frameStderr && errOut != nil {
			w = errOut
		}
		if w == nil {
			continue
		}
		if _, err := w.Write(f.data); err != nil {
			return nil // the client went away
		}
	}
}
