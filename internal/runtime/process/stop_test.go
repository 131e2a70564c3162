package process

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

func TestStopWithSIGTERMHonoured(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "300"))
	begin := time.Now()
	if err := r.Stop(stopCtx(t), id, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("Stop took %v: waited for the grace period", d)
	}
	st := status(t, r, id) // Stop returns once the exit is recorded
	if st.State != runtime.StateExited || st.Signal != int32(syscall.SIGTERM) || st.ExitCode != 128+15 {
		t.Errorf("got %s signal %d exit %d, want exited by SIGTERM (143)", st.State, st.Signal, st.ExitCode)
	}
	if err := r.Stop(stopCtx(t), id, time.Minute); err != nil {
		t.Errorf("Stop of an exited instance: %v", err)
	}
}

func TestStopKillsWhatIgnoresSIGTERMAfterGrace(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	spec := testSpec(t, "sh", "-c", `trap "" TERM; echo ready; while :; do sleep 1; done`)
	id := run(t, r, spec)
	waitLog(t, spec.LogPath, "ready")
	const grace = 500 * time.Millisecond
	begin := time.Now()
	if err := r.Stop(stopCtx(t), id, grace); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < grace {
		t.Errorf("Stop returned after %v, before the grace period", d)
	}
	st := status(t, r, id)
	if st.State != runtime.StateExited || st.Signal != int32(syscall.SIGKILL) || st.ExitCode != 137 {
		t.Errorf("got %s signal %d exit %d, want exited by SIGKILL (137)", st.State, st.Signal, st.ExitCode)
	}
}

// A main process that leaves a setsid'd child behind and exits: the shim
// kills the child, as a runtime kills a container when its init dies.
func TestOrphansDieWithTheMainProcess(t *testing.T) { bothWays(t, testOrphansDie) }

func testOrphansDie(t *testing.T, r *Runtime) {
	id := run(t, r, testSpec(t, "sh", "-c",
		`setsid sh -c 'echo $$ > orphan.pid; exec sleep 300' & while [ ! -s orphan.pid ]; do :; done; exit 0`))
	st := waitExit(t, r, id)
	if st.ExitCode != 0 {
		t.Fatalf("exit %d %s", st.ExitCode, st.Message)
	}
	b, err := os.ReadFile(filepath.Join(r.root, id, workDir, "orphan.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		t.Errorf("orphan %d (%q) survived its container", pid, cmdline)
	}
}

func TestStopKillsForkedChildren(t *testing.T) { bothWays(t, testStopKillsForkedChildren) }

func testStopKillsForkedChildren(t *testing.T, r *Runtime) {
	spec := testSpec(t, "sh", "-c", `trap "" TERM; (trap "" TERM; setsid sleep 300 & echo child $!; wait) & echo ready; wait`)
	id := run(t, r, spec)
	waitLog(t, spec.LogPath, "ready")
	waitLog(t, spec.LogPath, "child ")
	if err := r.Stop(stopCtx(t), id, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if st := status(t, r, id); st.Signal != int32(syscall.SIGKILL) {
		t.Errorf("signal %d, want SIGKILL", st.Signal)
	}
	for _, e := range readCRILog(t, spec.LogPath) {
		if pid, ok := strings.CutPrefix(e.content, "child "); ok {
			p, _ := strconv.Atoi(pid)
			if alive(p) {
				t.Errorf("child %d survived Stop", p)
			}
		}
	}
}
