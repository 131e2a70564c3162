package process

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Start launches the shim in a new session, detached from the agent (stdio
// to shim.log, no environment), and returns once the shim recorded the start
// (running, or exited with StartError).
func (r *Runtime) Start(ctx context.Context, id string) error {
	d, err := r.dir(id)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if r.starting[id] {
		r.mu.Unlock()
		return fmt.Errorf("start container %s: already starting: %w", id, runtime.ErrConflict)
	}
	r.starting[id] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.starting, id)
		r.mu.Unlock()
	}()

	st, err := d.readState()
	if err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	if st.state() != runtime.StateCreated {
		return fmt.Errorf("start container %s: it is %s: %w", id, st.state(), runtime.ErrConflict)
	}
	if _, spawned, _ := d.readShim(); spawned {
		// An earlier agent started it and died before the shim recorded it.
		return fmt.Errorf("start container %s: already started: %w", id, runtime.ErrConflict)
	}
	pidfd, readyR, err := r.spawnShim(d)
	if err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	done := make(chan error, 1)
	go func() { done <- r.awaitShim(id, d, readyR, pidfd) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// awaitShim carries on: the exit will still be watched.
		return fmt.Errorf("start container %s: %w", id, ctx.Err())
	}
}

// spawnShim starts the shim and records it in shim.json. It returns a pidfd
// for the shim and the read end of the shim's ready pipe.
func (r *Runtime) spawnShim(d instanceDir) (pidfd int, ready *os.File, err error) {
	shimLog, err := os.OpenFile(d.path(shimLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return -1, nil, err
	}
	defer shimLog.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return -1, nil, err
	}
	defer readyW.Close()
	cmd := exec.Command(r.shim, ShimCommand, string(d))
	cmd.Env = []string{} // nothing of the agent's environment reaches a container
	cmd.Dir = string(d)
	cmd.Stdout = shimLog
	cmd.Stderr = shimLog
	cmd.ExtraFiles = []*os.File{readyW} // fd 3 in the shim
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		readyR.Close()
		return -1, nil, fmt.Errorf("start shim: %w", err)
	}
	pid := cmd.Process.Pid
	// The shim is our child and unreaped until the monitor reaps it, so its
	// pid cannot be reused before the pidfd and start time are taken.
	pidfd, err = unix.PidfdOpen(pid, 0)
	if err == nil {
		var ps procStat
		if ps, err = readProcStat(pid); err == nil {
			err = writeJSON(d.path(shimFile), shimRecord{Pid: pid, StartTime: ps.StartTime})
		}
		if err != nil {
			unix.Close(pidfd)
		}
	}
	cmd.Process.Release() // the monitor reaps it through the pidfd
	if err != nil {
		cmd.Process.Kill()
		readyR.Close()
		return -1, nil, fmt.Errorf("track shim: %w", err)
	}
	return pidfd, readyR, nil
}

// awaitShim waits for the shim to close its ready pipe (after recording the
// start, or by dying), announces the start, then hands the pidfd to the
// monitor, so that an instance's exit event always follows its start event.
func (r *Runtime) awaitShim(id string, d instanceDir, ready *os.File, pidfd int) error {
	io.Copy(io.Discard, ready)
	ready.Close()
	exited := make(chan struct{})
	r.mu.Lock()
	r.watched[id] = exited
	r.mu.Unlock()

	st, stErr := d.readState()
	cfg, cfgErr := d.readConfig()
	// A command that started has StartedAt, even if it already exited (the
	// event is still due); one that could not start (StartError) has not.
	if stErr == nil && cfgErr == nil && !st.StartedAt.IsZero() {
		r.log.Info("container started", "pod", cfg.Spec.PodNamespace+"/"+cfg.Spec.PodName, "container", cfg.Spec.Name, "id", id, "pid", st.Pid)
		r.events.Push(runtime.Event{ID: id, PodUID: cfg.Spec.PodUID, Name: cfg.Spec.Name, State: runtime.StateRunning})
	}
	if err := r.mon.watch(id, pidfd); err != nil {
		r.mu.Lock()
		delete(r.watched, id)
		r.mu.Unlock()
		return fmt.Errorf("start container %s: %w", id, err)
	}
	if stErr == nil && st.state() == runtime.StateCreated {
		return fmt.Errorf("start container %s: shim failed before starting it: %s", id, lastLine(d.path(shimLogFile)))
	}
	return nil
}

// lastLine returns the last line of a (small) file, for error messages.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}
