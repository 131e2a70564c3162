package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Stop sends the container's stop signal (SIGTERM unless its spec says
// otherwise), waits up to grace, then SIGKILLs every process of it and
// returns once the shim recorded the exit. An instance that is not running
// (created, exited) is left alone.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	d, err := r.dir(id)
	if err != nil {
		return err
	}
	if err := r.settleCreated(ctx, d, id); err != nil {
		return err
	}
	st, exited, err := r.runningState(d, id)
	if err != nil || exited == nil {
		return err
	}
	if grace > 0 {
		sig := syscall.SIGTERM
		if cfg, err := d.readConfig(); err == nil && cfg.Spec.StopSignal != 0 {
			sig = cfg.Spec.StopSignal
		}
		r.signalContainer(d, st, sig)
		timer := r.clock.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-exited:
			return nil
		case <-timer.C():
		case <-ctx.Done():
			return fmt.Errorf("stop container %s: %w", id, ctx.Err())
		case <-r.closed:
			return fmt.Errorf("stop container %s: %w", id, errClosed)
		}
		r.log.Info("container did not stop in time, killing it", "id", id, "grace", grace)
	}
	r.signalContainer(d, st, syscall.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop container %s: %w", id, ctx.Err())
	case <-r.closed:
		return fmt.Errorf("stop container %s: %w", id, errClosed)
	}
}

// settleCreated prepares an instance that is still created for a stop: a
// start under way (this agent's, or a shim an earlier agent spawned) is
// waited for; an instance nobody started is recorded exited (137, as a
// container killed before it ran) so that it can never start afterwards.
func (r *Runtime) settleCreated(ctx context.Context, d instanceDir, id string) error {
	deadline := r.clock.Now().Add(settleTimeout)
	for {
		st, err := d.readState()
		if err != nil {
			return fmt.Errorf("container %s: %w", id, err)
		}
		if st.state() != runtime.StateCreated {
			return nil
		}
		r.mu.Lock()
		_, watched := r.watched[id]
		if !r.starting[id] && !watched {
			if _, spawned, _ := d.readShim(); !spawned {
				r.starting[id] = true // keeps Start out while the exit is recorded
				r.mu.Unlock()
				err := r.recordNeverStarted(d, id)
				r.mu.Lock()
				delete(r.starting, id)
				r.mu.Unlock()
				return err
			}
		}
		r.mu.Unlock()
		if r.clock.Now().After(deadline) {
			return fmt.Errorf("stop container %s: its start did not finish within %v: %w", id, settleTimeout, runtime.ErrConflict)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stop container %s: %w", id, ctx.Err())
		case <-r.clock.After(20 * time.Millisecond):
		}
	}
}

// settleTimeout bounds the wait for a start under way; a shim records the
// start within milliseconds of being spawned.
const settleTimeout = 10 * time.Second

func (r *Runtime) recordNeverStarted(d instanceDir, id string) error {
	cfg, err := d.readConfig()
	if err != nil {
		return fmt.Errorf("container %s: %w", id, err)
	}
	st := instanceState{State: runtime.StateExited.String(), FinishedAt: r.clock.Now(), ExitCode: 137,
		Message: "container was stopped before it started"}
	if err := d.writeState(st); err != nil {
		return fmt.Errorf("container %s: %w", id, err)
	}
	r.log.Info("container stopped before it started", "pod", cfg.Spec.PodNamespace+"/"+cfg.Spec.PodName, "container", cfg.Spec.Name, "id", id)
	r.events.Push(runtime.Event{ID: id, PodUID: cfg.Spec.PodUID, Name: cfg.Spec.Name, State: runtime.StateExited})
	return nil
}

// runningState returns the state of a running instance and the channel closed
// once its exit is recorded; exited is nil if it is not running.
func (r *Runtime) runningState(d instanceDir, id string) (st instanceState, exited <-chan struct{}, err error) {
	for range 2 {
		st, err = d.readState()
		if err != nil {
			return st, nil, fmt.Errorf("container %s: %w", id, err)
		}
		if st.state() != runtime.StateRunning {
			return st, nil, nil
		}
		r.mu.Lock()
		ch, ok := r.watched[id]
		r.mu.Unlock()
		if ok {
			return st, ch, nil
		}
		// Running but unwatched: the exit was just announced (the next read
		// says exited), or the shim is gone and adopt records it lost.
		r.adopt(id)
	}
	return st, nil, fmt.Errorf("container %s: running but its shim cannot be watched", id)
}

// signalContainer signals the main process group and every other process of
// the container: the cgroup's members, or without a cgroup the shim's
// descendants (the shim is a child subreaper, so orphans are among them).
func (r *Runtime) signalContainer(d instanceDir, st instanceState, sig syscall.Signal) {
	if ps, err := readProcStat(st.Pid); err == nil && ps.StartTime == st.PidStartTime {
		if err := signalGroup(st.Pid, sig); err != nil {
			r.log.Warn("cannot signal container", "pid", st.Pid, "signal", sig, "err", err)
		}
	}
	cg := cgroupSet{Dirs: st.Cgroups}
	if len(cg.Dirs) > 0 {
		cg.signal(sig)
		return
	}
	if rec, ok, err := d.readShim(); err == nil && ok {
		if ps, err := readProcStat(rec.Pid); err == nil && ps.StartTime == rec.StartTime {
			signalAll(descendants(rec.Pid), sig)
		}
	}
}

// Remove kills the instance if it runs and deletes its directory and cgroup.
// The log is kept: it belongs to the pod's log directory.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	d, err := r.dir(id)
	if err != nil {
		return err
	}
	r.mu.Lock()
	starting := r.starting[id]
	r.mu.Unlock()
	if starting {
		return fmt.Errorf("remove container %s: it is starting: %w", id, runtime.ErrConflict)
	}
	if err := r.Stop(ctx, id, 0); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	if st, err := d.readState(); err == nil {
		if err := (cgroupSet{Dirs: st.Cgroups}).remove(); err != nil {
			return fmt.Errorf("remove container %s: %w", id, err)
		}
	}
	// Renamed first so that List never sees half a directory.
	gone := filepath.Join(r.root, ".remove-"+id)
	if err := os.Rename(string(d), gone); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	r.mu.Lock()
	delete(r.sandboxOf, id)
	r.mu.Unlock()
	r.log.Info("container removed", "id", id)
	return nil
}
