package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// Session is the streams of an interactive exec. A nil stream is not
// connected: no stdin reads /dev/null, no stdout or stderr is discarded.
type Session struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// TTY runs the command on a pseudo-terminal that is its controlling
	// terminal: Stdin feeds it, Stdout gets everything it prints (Stderr is
	// unused), and each value of Resize sets its size.
	TTY    bool
	Resize <-chan remotecommand.TerminalSize
}

// ExecSession runs cmd in the running container id, in the same context as
// Exec (environment, working directory, user, cgroup, mount namespace),
// connected to the session's streams. It returns when the command has exited
// and its output has been copied, with the exit code as Exec reports it. When
// ctx ends first (the client went away) the command's process group is
// killed. Stdin closing is end of input, not the end of the session.
func (r *Runtime) ExecSession(ctx context.Context, id string, cmd []string, s Session) (int, error) {
	c, err := r.execCommand(id, cmd)
	if err != nil {
		return -1, err
	}
	if s.TTY {
		return c.runOnTerminal(ctx, s)
	}
	c.SysProcAttr.Setpgid = true
	c.Stdout, c.Stderr = s.Stdout, s.Stderr
	var input *os.File
	if s.Stdin != nil {
		// A pipe of our own rather than exec's: exec would wait for the copy,
		// which ends only when the client closes stdin, not when the command exits.
		pr, pw, err := os.Pipe()
		if err != nil {
			return -1, fmt.Errorf("exec in container %s: stdin: %w", id, err)
		}
		defer pw.Close()
		c.Stdin, input = pr, pw
	}
	waited, err := c.start()
	if f, ok := c.Stdin.(*os.File); ok {
		f.Close() // the child's end
	}
	if err != nil {
		return -1, err
	}
	if input != nil {
		go func() {
			// Ends at end of input, or once the stream is closed after the session.
			_, _ = io.Copy(input, s.Stdin)
			input.Close()
		}()
	}
	return c.wait(ctx, waited)
}

// wait returns the exit code once the command exited; when ctx ends first
// its process group is killed.
func (c *containerCommand) wait(ctx context.Context, waited <-chan error) (int, error) {
	select {
	case err := <-waited:
		return exitCode(c.ProcessState, err)
	case <-ctx.Done():
		signalGroup(c.Process.Pid, syscall.SIGKILL)
		<-waited
		return -1, fmt.Errorf("exec %q in container %s: %w", c.Args[0], c.id, ctx.Err())
	}
}

// runOnTerminal runs the command in a new session whose controlling
// terminal is a fresh pseudo-terminal, and connects its master to s.
func (c *containerCommand) runOnTerminal(ctx context.Context, s Session) (int, error) {
	master, slave, err := openPTY()
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: pseudo-terminal: %w", c.id, err)
	}
	defer master.Close()
	c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
	// Its own session (so its own process group), the terminal as its
	// controlling one: ^C reaches it as SIGINT.
	c.SysProcAttr.Setsid, c.SysProcAttr.Setctty, c.SysProcAttr.Ctty = true, true, 0
	waited, err := c.start()
	slave.Close()
	if err != nil {
		return -1, err
	}

	stop := make(chan struct{})
	var resizing sync.WaitGroup
	resizing.Go(func() {
		for {
			select {
			case <-stop:
				return
			case size, ok := <-s.Resize:
				if !ok {
					return
				}
				if err := setTerminalSize(master, size); err != nil {
					c.r.log.Debug("exec: resizing the terminal", "id", c.id, "err", err)
				}
			}
		}
	})
	// Joined before master is closed: a resize never reaches a reused descriptor.
	defer resizing.Wait()
	defer close(stop)

	if s.Stdin != nil {
		go func() {
			// Ends at end of input, or with an error once master is closed.
			_, _ = io.Copy(master, s.Stdin)
		}()
	}
	out := s.Stdout
	if out == nil {
		out = io.Discard
	}
	copied := make(chan struct{})
	go func() {
		// Ends with EIO once no process holds the terminal any more, or when master is closed.
		_, _ = io.Copy(out, master)
		close(copied)
	}()

	code, err := c.wait(ctx, waited)
	// What the command printed last is still in the terminal: read it,
	// unless a background process keeps the terminal open.
	timer := c.r.clock.NewTimer(execWaitDelay)
	defer timer.Stop()
	select {
	case <-copied:
	case <-timer.C():
	}
	master.Close()
	<-copied
	return code, err
}

// openPTY opens a pseudo-terminal pair. The master is non-blocking, so that
// the runtime's poller serves it and closing it ends a read in progress.
func openPTY() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("unlock: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("number: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

func setTerminalSize(master *os.File, size remotecommand.TerminalSize) error {
	conn, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ioctlErr error
	err = conn.Control(func(fd uintptr) {
		ioctlErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
	})
	return errors.Join(err, ioctlErr)
}
