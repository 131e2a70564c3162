package cri

import (
	"time"

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
// An exit status of 137 (SIGKILL) is left to the CRI: it may be an OOM
// kill, which containerd finds out while handling the exit; reporting
// "Error" first would change the container's terminated reason afterwards.

// earlyExit is an exit heard before the CRI reports it.
type earlyExit struct {
	code int32
	at   time.Time
}

// oomExitStatus is the status of a process killed by SIGKILL, as an OOM kill is.
const oomExitStatus = 137

// ObserveTaskExit records that the main process of container id exited
// with status at time at, and reports the container exited. Containers of
// no pod, sandboxes and unknown ids are ignored.
func (r *Runtime) ObserveTaskExit(id string, status uint32, at time.Time) {
	if status == oomExitStatus {
		return
	}
	// The tracker's view, not r.containers: a relist that began before the
	// container was made drops it from there until it is read again.
	podUID, name, _, ok := r.events.lookup(id)
	if !ok || podUID == "" || name == "" { // unknown, or a sandbox
		return
	}
	r.mu.Lock()
	r.early[id] = earlyExit{code: int32(status), at: at}
	r.mu.Unlock()
	r.events.observe(id, podUID, name, runtime.StateExited)
}

// earlyExitTTL bounds how long an early exit is kept for a container that
// was removed behind this runtime's back (Remove and the CRI's own report
// forget it otherwise).
const earlyExitTTL = 10 * time.Minute

// pruneEarlyExits forgets early exits older than earlyExitTTL.
func (r *Runtime) pruneEarlyExits(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, e := range r.early {
		if now.Sub(e.at) > earlyExitTTL {
			delete(r.early, id)
		}
	}
}

// hadEarlyExit: container id's exit was reported early.
func (r *Runtime) hadEarlyExit(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.early[id]
	return ok
}

// withEarlyExit gives st the exit heard early if the CRI does not report
// it yet, and forgets the early exit once the CRI does.
func (r *Runtime) withEarlyExit(st runtime.Status) runtime.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.early[st.ID]
	if !ok {
		return st
	}
	if st.State == runtime.StateExited {
		delete(r.early, st.ID)
		return st
	}
	st.State, st.ExitCode, st.FinishedAt = runtime.StateExited, e.code, e.at
	if st.FinishedAt.Before(st.StartedAt) {
		st.StartedAt = st.FinishedAt
	}
	return st
}
