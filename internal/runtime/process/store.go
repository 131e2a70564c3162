package process

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/podvisor/podvisor/internal/host/durable"
	"github.com/podvisor/podvisor/internal/runtime"
)

// Layout of one instance directory, Root/<id>:
//
//	config.json       the spec and creation time; written by Create, and by
//	                  UpdateResources (the spec's resources only)
//	state.json        state, pids, exit status; written by the shim while it
//	                  lives, by the agent only when no shim can (create, lost shim)
//	shim.json         pid and start time of the shim; written by the agent at Start
//	shim.log          the shim's own stdout/stderr
//	termination-log   host file behind TerminationMessagePath
//	work/             default working directory
const (
	configFile      = "config.json"
	stateFileName   = "state.json"
	shimFile        = "shim.json"
	shimLogFile     = "shim.log"
	terminationFile = "termination-log"
	workDir         = "work"
)

// instanceConfig is config.json.
type instanceConfig struct {
	ID        string                `json:"id"`
	CreatedAt time.Time             `json:"createdAt"`
	Spec      runtime.ContainerSpec `json:"spec"`
	// TerminationMessageFile is the host file behind Spec.TerminationMessagePath.
	TerminationMessageFile string `json:"terminationMessageFile,omitempty"`
	// NoCgroups: the shim makes no cgroup even as root (Config.NoCgroups).
	NoCgroups bool `json:"noCgroups,omitempty"`
}

// instanceState is state.json.
type instanceState struct {
	State string `json:"state"` // runtime.State.String()
	Pid   int    `json:"pid,omitempty"`
	// PidStartTime guards signals to Pid's group against pid reuse.
	PidStartTime uint64    `json:"pidStartTime,omitempty"`
	StartedAt    time.Time `json:"startedAt,omitzero"`
	FinishedAt   time.Time `json:"finishedAt,omitzero"`
	ExitCode     int32     `json:"exitCode"`
	Signal       int32     `json:"signal,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Message      string    `json:"message,omitempty"`
	// Cgroups are the directories of the container's cgroups (one per v1
	// hierarchy, or one v2 directory); empty when none could be made.
	Cgroups []string `json:"cgroups,omitempty"`
}

// shimRecord is shim.json: enough to find the shim again and to tell it from
// a later process that reused its pid.
type shimRecord struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"startTime"` // /proc/<pid>/stat field 22, clock ticks since boot
}

func (s instanceState) state() runtime.State {
	switch s.State {
	case runtime.StateCreated.String():
		return runtime.StateCreated
	case runtime.StateRunning.String():
		return runtime.StateRunning
	case runtime.StateExited.String():
		return runtime.StateExited
	}
	return runtime.StateUnknown
}

// writeJSON replaces path atomically: a reader sees the old or the new
// content, never a torn one, even if the writer dies half way.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(path, append(b, '\n'))
}

// syncDir makes a rename or a new entry in dir durable: an exit or an attempt
// once recorded must survive a crash of the machine, not only of the agent.
func syncDir(dir string) error { return durable.SyncDir(dir) }

func readJSON(path string, v any) error { return durable.ReadJSON(path, v) }

// instanceDir is one container's directory.
type instanceDir string

func (d instanceDir) path(name string) string { return filepath.Join(string(d), name) }

func (d instanceDir) readConfig() (instanceConfig, error) {
	var c instanceConfig
	return c, readJSON(d.path(configFile), &c)
}

func (d instanceDir) readState() (instanceState, error) {
	var s instanceState
	return s, readJSON(d.path(stateFileName), &s)
}

func (d instanceDir) writeState(s instanceState) error {
	return writeJSON(d.path(stateFileName), s)
}

// readShim returns the recorded shim, or ok=false if none was started.
func (d instanceDir) readShim() (rec shimRecord, ok bool, err error) {
	err = readJSON(d.path(shimFile), &rec)
	if errors.Is(err, os.ErrNotExist) {
		return rec, false, nil
	}
	return rec, err == nil, err
}

// status joins config.json and state.json into the runtime's view.
func (d instanceDir) status() (runtime.Status, error) {
	c, err := d.readConfig()
	if err != nil {
		return runtime.Status{}, err
	}
	s, err := d.readState()
	if err != nil {
		return runtime.Status{}, err
	}
	st := runtime.Status{
		ID:                     c.ID,
		SandboxID:              c.Spec.SandboxID,
		PodUID:                 c.Spec.PodUID,
		PodNamespace:           c.Spec.PodNamespace,
		PodName:                c.Spec.PodName,
		Name:                   c.Spec.Name,
		Attempt:                c.Spec.Attempt,
		State:                  s.state(),
		CreatedAt:              c.CreatedAt,
		StartedAt:              s.StartedAt,
		FinishedAt:             s.FinishedAt,
		ExitCode:               s.ExitCode,
		Signal:                 s.Signal,
		Reason:                 s.Reason,
		Message:                s.Message,
		LogPath:                c.Spec.LogPath,
		TerminationMessageFile: c.TerminationMessageFile,
		Labels:                 c.Spec.Labels,
	}
	if st.State == runtime.StateRunning {
		st.Pid = s.Pid
	}
	return st, nil
}
