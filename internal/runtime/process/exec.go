package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// execWaitDelay bounds how long output pipes held open by a backgrounded
// grandchild may keep Exec from returning after the command exited.
const execWaitDelay = time.Second

// Exec runs cmd with the container's environment and working directory, in
// its own process group and, as root, in the container's cgroup. The exit
// code is the command's, or 128+signal if a signal killed it. At timeout
// (0: none) or when ctx ends, the whole process group is killed and Exec
// returns -1 and an error (runtime.ErrTimeout for the timeout). A command that
// cannot be found is an error with exit code -1.
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string, stdout, stderr io.Writer, timeout time.Duration) (int, error) {
	c, err := r.execCommand(id, cmd)
	if err != nil {
		return -1, err
	}
	c.Stdout, c.Stderr = stdout, stderr
	c.SysProcAttr.Setpgid = true
	waited, err := c.start()
	if err != nil {
		return -1, err
	}
	var expired <-chan time.Time
	if timeout > 0 {
		timer := r.clock.NewTimer(timeout)
		defer timer.Stop()
		expired = timer.C()
	}
	select {
	case err := <-waited:
		return exitCode(c.ProcessState, err)
	case <-expired:
		signalGroup(c.Process.Pid, syscall.SIGKILL)
		<-waited
		return -1, fmt.Errorf("exec %q in container %s: timed out after %v: %w", cmd[0], id, timeout, runtime.ErrTimeout)
	case <-ctx.Done():
		signalGroup(c.Process.Pid, syscall.SIGKILL)
		<-waited
		return -1, fmt.Errorf("exec %q in container %s: %w", cmd[0], id, ctx.Err())
	}
}

// containerCommand is a command that runs in a container's context once
// started: its environment, working directory, user, cgroup and, as root,
// mount namespace.
type containerCommand struct {
	*exec.Cmd
	r       *Runtime
	id      string
	pid     int       // the container's main process: its mount namespace is joined
	cgroups cgroupSet // joined at birth (v2) or right after start (v1)
}

// execCommand prepares cmd to run in the running container id; the caller
// sets the streams and process group or session, then calls start.
func (r *Runtime) execCommand(id string, cmd []string) (*containerCommand, error) {
	d, err := r.dir(id)
	if err != nil {
		return nil, err
	}
	if len(cmd) == 0 {
		return nil, fmt.Errorf("exec in container %s: no command: %w", id, runtime.ErrInvalid)
	}
	cfg, err := d.readConfig()
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	st, err := d.readState()
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if st.state() != runtime.StateRunning {
		return nil, fmt.Errorf("exec in container %s: it is %s: %w", id, st.state(), runtime.ErrConflict)
	}
	env := containerEnv(cfg)
	cwd := workingDir(d, cfg)
	path, _ := lookupEnv(env, "PATH")
	bin, err := lookPath(cmd[0], path, cwd)
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", id, err)
	}
	c := &containerCommand{Cmd: exec.Command(bin), r: r, id: id, pid: st.Pid, cgroups: cgroupSet{Dirs: st.Cgroups}}
	c.Args = cmd
	c.Env = env
	c.Dir = cwd
	c.WaitDelay = execWaitDelay
	c.SysProcAttr = &syscall.SysProcAttr{Credential: credential(cfg.Spec.User)}
	return c, nil
}

// start starts the command; the returned channel delivers Wait's result.
func (c *containerCommand) start() (<-chan error, error) {
	if len(c.cgroups.Dirs) == 1 && unified() {
		// v2: born in the cgroup, no window in which a fork escapes it.
		if f, err := os.Open(c.cgroups.Dirs[0]); err == nil {
			defer f.Close()
			c.SysProcAttr.UseCgroupFD = true
			c.SysProcAttr.CgroupFD = int(f.Fd())
		}
	}
	start := c.Start
	if os.Geteuid() == 0 && c.pid > 0 {
		// The container's mounts (volumes, termination log) are where it sees them.
		start = func() error { return inMountNamespaceOf(c.pid, c.Start) }
	}
	if err := start(); err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", c.id, err)
	}
	if len(c.cgroups.Dirs) > 0 && !c.SysProcAttr.UseCgroupFD {
		// v1: moved right after it started; what it forked before stays out.
		if err := c.cgroups.add(c.Process.Pid); err != nil {
			c.r.log.Warn("exec outside the container's cgroup", "id", c.id, "err", err)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	return waited, nil
}

func exitCode(ps *os.ProcessState, waitErr error) (int, error) {
	if ps == nil {
		return -1, waitErr
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return ps.ExitCode(), waitErr // e.g. copying output failed
	}
	return ps.ExitCode(), nil
}
