package process

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/internal/runtime"
)

// adopt watches the shim of an instance that is not known to have exited:
// at New, for every instance a previous agent left behind. A shim that is
// gone without recording the exit is recorded as lost.
func (r *Runtime) adopt(id string) {
	d := instanceDir(r.root + "/" + id)
	st, err := d.readState()
	if err != nil {
		return
	}
	rec, started, err := d.readShim()
	if err != nil || !started {
		return // never started: stays created
	}
	if st.state() == runtime.StateExited {
		reapShim(rec) // when this process started it: the exit is known, only the zombie is left
		return
	}
	if pidfd, ok := openShim(rec); ok {
		r.mu.Lock()
		r.watched[id] = make(chan struct{})
		r.mu.Unlock()
		if err := r.mon.watch(id, pidfd); err != nil {
			r.mu.Lock()
			delete(r.watched, id)
			r.mu.Unlock()
			r.log.Error("cannot watch container", "id", id, "err", err)
			return
		}
		r.log.Info("container re-adopted", "id", id, "shim", rec.Pid)
		if st.state() == runtime.StateCreated {
			go r.announceAdoptedStart(id, d)
		}
		return
	}
	r.recordLost(id, d)
}

// openShim returns a pidfd for the recorded shim if that very process still
// exists (running or not yet reaped). The pidfd is taken before the start
// time is compared, so the pid cannot be reused in between.
func openShim(rec shimRecord) (int, bool) {
	pidfd, err := unix.PidfdOpen(rec.Pid, 0)
	if err != nil {
		return -1, false
	}
	ps, err := readProcStat(rec.Pid)
	if err != nil || ps.StartTime != rec.StartTime {
		unix.Close(pidfd)
		return -1, false
	}
	return pidfd, true
}

// announceAdoptedStart waits for a shim that an earlier agent spawned to
// record the start, and announces it as Start would have: the agent died
// between spawning the shim and hearing from it.
func (r *Runtime) announceAdoptedStart(id string, d instanceDir) {
	for {
		st, err := d.readState()
		if err != nil || st.state() == runtime.StateExited {
			return // the exit event covers it
		}
		if st.state() == runtime.StateRunning {
			if cfg, err := d.readConfig(); err == nil {
				r.events.Push(runtime.Event{ID: id, PodUID: cfg.Spec.PodUID, Name: cfg.Spec.Name, State: runtime.StateRunning})
			}
			return
		}
		select {
		case <-r.closed:
			return
		case <-r.clock.After(20 * time.Millisecond):
		}
	}
}

func reapShim(rec shimRecord) {
	if pidfd, ok := openShim(rec); ok {
		var info unix.Siginfo
		unix.Waitid(unix.P_PIDFD, pidfd, &info, unix.WEXITED|unix.WNOHANG, nil)
		unix.Close(pidfd)
	}
}

// shimExited runs on the monitor goroutine when a watched shim exited: its
// record is final; it is read, announced, and waiters are released.
func (r *Runtime) shimExited(id string) {
	d := instanceDir(r.root + "/" + id)
	if st, err := d.readState(); err == nil && st.state() != runtime.StateExited {
		r.recordLost(id, d)
	}
	if cfg, err := d.readConfig(); err == nil {
		st, _ := d.readState()
		r.log.Info("container exited", "pod", cfg.Spec.PodNamespace+"/"+cfg.Spec.PodName, "container", cfg.Spec.Name, "id", id,
			"exitCode", st.ExitCode, "signal", st.Signal, "reason", st.Reason)
		r.events.Push(runtime.Event{ID: id, PodUID: cfg.Spec.PodUID, Name: cfg.Spec.Name, State: runtime.StateExited})
	}
	r.mu.Lock()
	exited := r.watched[id]
	delete(r.watched, id)
	r.mu.Unlock()
	if exited != nil {
		close(exited)
	}
}

// lostKillTimeout bounds the wait for the processes of a lost shim's
// container to die after SIGKILL.
const lostKillTimeout = 5 * time.Second

// recordLost handles a shim that died without recording the exit (killed,
// crashed): what is left of the container is killed and the instance is
// recorded exited, with 137 as containerd reports a dead shim's task.
func (r *Runtime) recordLost(id string, d instanceDir) {
	st, err := d.readState()
	if err != nil {
		return
	}
	cg := cgroupSet{Dirs: st.Cgroups}
	mainAlive := func() bool {
		if st.Pid <= 0 || st.PidStartTime == 0 {
			return false
		}
		ps, err := readProcStat(st.Pid)
		return err == nil && ps.StartTime == st.PidStartTime && ps.State != 'Z'
	}
	// The exit is recorded only once nothing of the container runs: the
	// agent may report the pod gone as soon as it reads it.
	deadline := r.clock.Now().Add(lostKillTimeout)
	for {
		cg.signal(syscall.SIGKILL)
		if mainAlive() {
			signalGroup(st.Pid, syscall.SIGKILL)
		}
		if (len(cg.procs()) == 0 && !mainAlive()) || r.clock.Now().After(deadline) {
			break
		}
		r.clock.Sleep(5 * time.Millisecond)
	}
	cg.remove() // fails while the killed processes linger; Remove retries
	lost := st
	lost.State = runtime.StateExited.String()
	lost.FinishedAt = r.clock.Now()
	if st.state() == runtime.StateCreated {
		lost.ExitCode = 128
		lost.Reason = "StartError"
		lost.Message = "podvisor shim failed before starting the container: " + lastLine(d.path(shimLogFile))
	} else {
		lost.ExitCode = 137
		lost.Message = "podvisor shim exited without recording the container's exit"
	}
	if err := d.writeState(lost); err != nil {
		r.log.Error("cannot record lost container", "id", id, "err", err)
		return
	}
	r.log.Warn("container shim lost", "id", id, "state", st.State)
}
