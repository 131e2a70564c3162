package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Early exits. containerd's CRI reports a container's exit (its event and
// ContainerStatus) only after it has deleted the task through the shim,
// 100-200 ms after the exit on a busy node; containerd itself hears of the
// exit from the shim within a few ms. The agent that runs containerd passes
// those task exits to ObserveTaskExit, and the container is reported
// exited at once with the shim's exit status and time, which are what the
// CRI reports later.
//
// An exit status of 137 (SIGKILL) is not reported early: it may be an OOM
// kill, which containerd finds out while handling the exit; reporting
// "Error" first would change the container's terminated reason afterwards.
// It is kept all the same, to stand in for an exit the CRI reports lost: a
// container being stopped or deleted (the agent's stop ends in SIGKILL once
// the grace period is over, as does the removal of a running container) is
// the one most likely to be SIGKILLed when containerd is killed.

// Early exits are kept on disk (StateDir/exits/ID) until the CRI reports
// the exit itself or the container is gone: containerd killed before it
// handled an exit reports it after its restart as exit 255, reason
// "Unknown", and the exit the agent already published must not change.

// earlyExit is an exit heard before the CRI reports it, or the end of a
// container stopped before it started, which the CRI never reports (it
// keeps such a container created).
type earlyExit struct {
	code    int32
	at      time.Time
	message string // one line
}

// sigkillExitStatus is the status of a process killed by SIGKILL (an OOM kill too).
const sigkillExitStatus = 137

// containerd's CRI reports an exit it lost with this code and reason.
const (
	lostExitCode   = 255
	lostExitReason = "Unknown"
)

// ObserveTaskExit records that the main process of container id exited
// with status at time at, and reports the container exited (a SIGKILL's
// exit is only kept: lostOnly). Containers of no pod, sandboxes and unknown
// ids are ignored.
func (r *Runtime) ObserveTaskExit(id string, status uint32, at time.Time) {
	// The tracker's view, not r.containers: a relist that began before the
	// container was made drops it from there until it is read again.
	podUID, name, _, ok := r.events.lookup(id)
	if !ok || podUID == "" || name == "" { // unknown, or a sandbox
		return
	}
	e := earlyExit{code: int32(status), at: at}
	r.saveEarlyExit(id, e)
	r.mu.Lock()
	r.early[id] = e
	r.mu.Unlock()
	if e.lostOnly() {
		return
	}
	r.events.observe(id, podUID, name, runtime.StateExited)
}

// lostOnly: e stands in only for an exit the CRI reports lost; until then
// the CRI's state is reported (an exit of SIGKILL, maybe an OOM kill).
func (e earlyExit) lostOnly() bool {
	return e.code == sigkillExitStatus && e.message != neverStartedMessage
}

func (r *Runtime) earlyExitsDir() string { return filepath.Join(r.cfg.StateDir, "exits") }

// saveEarlyExit writes e before anyone hears of it. A failed write is
// logged: the exit is still reported, as the CRI would.
func (r *Runtime) saveEarlyExit(id string, e earlyExit) {
	if !validID(id) {
		return
	}
	b := fmt.Appendf(nil, "%d %d %s\n", e.code, e.at.UnixNano(), e.message)
	if err := os.WriteFile(filepath.Join(r.earlyExitsDir(), id), b, 0o600); err != nil {
		r.log.Warn("keeping an early exit", "id", id, "err", err)
	}
}

// loadEarlyExits reads the early exits an earlier agent kept; unreadable
// records are dropped.
func (r *Runtime) loadEarlyExits() error {
	dir := r.earlyExitsDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range entries {
		path := filepath.Join(dir, de.Name())
		b, err := os.ReadFile(path)
		var code int32
		var nanos int64
		var message string
		if err == nil {
			fields := strings.SplitN(strings.TrimSuffix(string(b), "\n"), " ", 3)
			_, err = fmt.Sscanf(strings.Join(fields[:min(2, len(fields))], " "), "%d %d", &code, &nanos)
			if len(fields) == 3 {
				message = fields[2]
			}
		}
		if err != nil {
			removeFile(path)
			continue
		}
		r.early[de.Name()] = earlyExit{code: code, at: time.Unix(0, nanos), message: message}
	}
	return nil
}

// forgetEarlyExitLocked drops id's early exit; r.mu is held.
func (r *Runtime) forgetEarlyExitLocked(id string) {
	if _, ok := r.early[id]; ok {
		delete(r.early, id)
		removeFile(filepath.Join(r.earlyExitsDir(), id))
	}
}

// pruneEarlyExits forgets the early exits of containers no longer listed.
func (r *Runtime) pruneEarlyExits(listed map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.early {
		if !listed[id] {
			r.forgetEarlyExitLocked(id)
		}
	}
}

// hadEarlyExit: container id's exit was reported early.
func (r *Runtime) hadEarlyExit(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.early[id]
	return ok && !e.lostOnly()
}

// withEarlyExit gives st the exit heard early if the CRI does not report
// it yet, or reports it lost; an exit the CRI reports is its own from then
// on, and the early one is forgotten. An exit the CRI reports lost is the
// one kept outside the CRI (Config.ExitKept) if there is one.
func (r *Runtime) withEarlyExit(st runtime.Status) runtime.Status {
	lost := st.State == runtime.StateExited && st.ExitCode == lostExitCode && st.Reason == lostExitReason
	var kept *earlyExit
	if lost && r.cfg.ExitKept != nil {
		if status, at, ok := r.cfg.ExitKept(st.ID); ok {
			kept = &earlyExit{code: int32(status), at: at}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.early[st.ID]
	if kept != nil {
		// The shim's record of the exit, where the agent may have
		// heard of it early or not at all (it died first).
		e, ok = *kept, true
	}
	if !ok {
		return st
	}
	if st.State == runtime.StateExited && !lost {
		r.forgetEarlyExitLocked(st.ID)
		return st
	}
	if e.lostOnly() && !lost {
		return st
	}
	st.State, st.ExitCode, st.FinishedAt, st.Reason, st.Message = runtime.StateExited, e.code, e.at, "", e.message
	if st.FinishedAt.Before(st.StartedAt) {
		st.StartedAt = st.FinishedAt
	}
	return st
}

// validID: id can name a file (a runtime's container IDs are hex).
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}

// neverStartedMessage is the message of a container stopped before it
// started, as on the process runtime.
const neverStartedMessage = "container was stopped before it started"

// stopUnstarted ends container id if it is created and was never started
// (its creator died before starting it): the CRI's StopContainer leaves
// such a container created, so that it would never end. It is reported
// exited 137 from now on, as the process runtime does, kept on disk as an
// early exit until the container is removed, and never started. It
// reports whether id was such a container.
func (r *Runtime) stopUnstarted(ctx context.Context, id string, m containerMeta) bool {
	if _, _, s, ok := r.events.lookup(id); ok && s != runtime.StateCreated {
		return false
	}
	resp, err := r.rs.ContainerStatus(quiet(ctx), id, false)
	if err != nil || resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_CREATED {
		return false
	}
	e := earlyExit{code: sigkillExitStatus, at: r.clock.Now(), message: neverStartedMessage}
	r.saveEarlyExit(id, e)
	r.mu.Lock()
	r.early[id] = e
	r.mu.Unlock()
	r.log.Info("container stopped before it started", "container", m.name, "id", id)
	r.events.observe(id, m.podUID, m.name, runtime.StateExited)
	return true
}

// stoppedBeforeStart: id was ended by stopUnstarted.
func (r *Runtime) stoppedBeforeStart(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.early[id]
	return ok && e.message == neverStartedMessage
}
