// Package keptexit is the record of a container's exit that podvisor's shim
// keeps for podvisor when containerd deletes the container's task.
//
// containerd's CRI handles a container's exit by deleting its task through
// the shim, and only then records the exit in its own checkpoint. containerd
// killed in between (it dies with podvisor) loses the exit: the next
// containerd finds no task for a container it recorded running, and reports
// exit code 255, reason Unknown (internal/cri/server/events.go
// handleContainerExit and restart.go loadContainer, v2.3.6). The shim, which
// has the exit until the task is deleted, writes it first into the CRI's
// state directory of the container, which the CRI removes with the
// container; podvisor reads it there when the CRI reports the exit lost.
package keptexit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Env names the directory of the CRI's container state directories
// (containerd's state directory/io.containerd.grpc.v1.cri/containers), in
// the environment podvisor gives its containerd, which its shims inherit.
// A shim without it keeps nothing.
const Env = "PODVISOR_KEPT_EXITS"

// fileName is the record's name in a container's directory.
const fileName = "podvisor-exit"

// Exit is a container's main process's exit.
type Exit struct {
	Status uint32
	At     time.Time
}

// Write keeps e as container id's exit in dir, if the CRI has a state
// directory for id there (a sandbox's task has none: nothing is kept).
func Write(dir, id string, e Exit) error {
	if dir == "" || !validID(id) {
		return nil
	}
	cdir := filepath.Join(dir, id)
	if _, err := os.Stat(cdir); err != nil {
		return nil
	}
	// Written whole or not at all: a half record must not be read. Not
	// durable.WriteFile: the record has to outlive a crash of containerd,
	// not of the machine (the CRI's state is under /run, gone at a reboot),
	// and an fsync would delay every container's exit.
	tmp := filepath.Join(cdir, fileName+".tmp")
	if err := os.WriteFile(tmp, format(e), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(cdir, fileName))
}

// Read is container id's exit kept in dir; false if none is.
func Read(dir, id string) (Exit, bool) {
	if dir == "" || !validID(id) {
		return Exit{}, false
	}
	b, err := os.ReadFile(filepath.Join(dir, id, fileName))
	if err != nil {
		return Exit{}, false
	}
	e, err := parse(b)
	return e, err == nil
}

// format is e as a record: "STATUS UNIX_NANOS\n".
func format(e Exit) []byte {
	return fmt.Appendf(nil, "%d %d\n", e.Status, e.At.UnixNano())
}

// parse reads a record made by format.
func parse(b []byte) (Exit, error) {
	bad := fmt.Errorf("kept exit %q: want STATUS UNIX_NANOS", b)
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return Exit{}, bad
	}
	status, err1 := strconv.ParseUint(fields[0], 10, 32)
	nanos, err2 := strconv.ParseInt(fields[1], 10, 64)
	if err1 != nil || err2 != nil || nanos <= 0 {
		return Exit{}, bad
	}
	return Exit{Status: uint32(status), At: time.Unix(0, nanos)}, nil
}

// validID: id names one directory.
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}
