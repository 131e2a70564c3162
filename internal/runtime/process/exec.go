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
	d, err := r.dir(id)
	if err != nil {
		return -1, err
	}
	if len(cmd) == 0 {
		return -1, fmt.Errorf("exec in container %s: no command: %w", id, runtime.ErrInvalid)
	}
	cfg, err := d.readConfig()
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}
	st, err := d.readState()
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if st.state() != runtime.StateRunning {
		return -1, fmt.Errorf("exec in container %s: it is %s: %w", id, st.state(), runtime.ErrConflict)
	}
	env := containerEnv(cfg)
	cwd := workingDir(d, cfg)
	path, _ := lookupEnv(env, "PATH")
	bin, err := lookPath(cmd[0], path, cwd)
	if err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}

	c := exec.Command(bin)
	c.Args = cmd
	c.Env = env
	c.Dir = cwd
	c.Stdout, c.Stderr = stdout, stderr
	c.WaitDelay = execWaitDelay
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: credential(cfg.Spec.User)}
	cg := cgroupSet{Dirs: st.Cgroups}
	if len(cg.Dirs) == 1 && unified() {
		// v2: born in the cgroup, no window in which a fork escapes it.
		if f, err := os.Open(cg.Dirs[0]); err == nil {
			defer f.Close()
			c.SysProcAttr.UseCgroupFD = true
			c.SysProcAttr.CgroupFD = int(f.Fd())
		}
	}
	start := c.Start
	if os.Geteuid() == 0 && st.Pid > 0 {
		// The container's mounts (volumes, termination log) are where it sees them.
		start = func() error { return inMountNamespaceOf(st.Pid, c.Start) }
	}
	if err := start(); err != nil {
		return -1, fmt.Errorf("exec in container %s: %w", id, err)
	}
	if len(cg.Dirs) > 0 && !c.SysProcAttr.UseCgroupFD {
		// v1: moved right after it started; what it forked before stays out.
		if err := cg.add(c.Process.Pid); err != nil {
			r.log.Warn("exec outside the container's cgroup", "id", id, "err", err)
		}
	}
	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()

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
