// Package runtimetest is the contract every runtime.Set keeps, as one
// test suite: each runtime's own tests call Run with a Harness that knows
// how to make that runtime and a shell container for it. The agent relies
// on exactly what is checked here, so two runtimes can share one pod model.
package runtimetest

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Harness adapts the suite to one runtime.
type Harness struct {
	// New returns a runtime on fresh state. At the end of the test every
	// sandbox and container it made is removed and the runtime closed.
	New func(t *testing.T) runtime.Set
	// Restart stands for an agent restart: it closes old (containers keep
	// running), calls away, and returns a new value over the same state.
	Restart func(t *testing.T, old runtime.Set, away func()) runtime.Set
	// Shell fills spec so that the container runs `sh -c script`: on the
	// host, or in an image that has a POSIX shell.
	Shell func(spec *runtime.ContainerSpec, script string)
}

// WaitLimit bounds every wait of the suite.
const WaitLimit = 30 * time.Second

// Run runs the whole contract against h's runtime.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		test func(t *testing.T, h Harness)
	}{
		{"SandboxLifecycle", testSandboxLifecycle},
		{"ExitCodeAndLog", testExitCodeAndLog},
		{"EventsInOrder", testEventsInOrder},
		{"StartErrorForMissingCommand", testStartError},
		{"StopHonouredWithinGrace", testStopHonoured},
		{"StopKillsAfterGrace", testStopKillsAfterGrace},
		{"StopWithZeroGraceKillsAtOnce", testStopZeroGrace},
		{"StopSignalFromSpec", testStopSignal},
		{"ExecExitCodeAndOutput", testExec},
		{"ExecTimeout", testExecTimeout},
		{"EnvAndWorkingDir", testEnvAndWorkingDir},
		{"TerminationMessageFile", testTerminationMessage},
		{"RestartReadoptsRunning", testReadoptRunning},
		{"RestartKeepsExitWhileAway", testExitWhileAway},
		{"StopBeforeStartEndsTheContainer", testStopBeforeStart},
		{"RemoveSandboxRemovesContainers", testRemoveSandbox},
		{"UnknownIDsAreNotFound", testNotFound},
		{"UpdateResourcesInPlace", testUpdateResources},
		{"ReopenLogAfterRename", testReopenLog},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, h) })
	}
}

// pod is one test pod: a sandbox and a log directory.
type pod struct {
	uid, sandbox, logDir string
}

func newPod(t *testing.T, rt runtime.Set) pod {
	t.Helper()
	p := pod{uid: "uid-" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-"), logDir: t.TempDir()}
	id, err := rt.Sandboxes.RunSandbox(ctx(t), runtime.SandboxSpec{
		PodUID: p.uid, PodNamespace: "default", PodName: "p", LogDir: p.logDir,
		Labels: map[string]string{"app": "runtimetest"},
	})
	if err != nil {
		t.Fatalf("RunSandbox: %v", err)
	}
	p.sandbox = id
	return p
}

func (p pod) spec(h Harness, name, script string) runtime.ContainerSpec {
	s := runtime.ContainerSpec{
		PodUID: p.uid, PodNamespace: "default", PodName: "p", Name: name, SandboxID: p.sandbox,
		LogPath:                filepath.Join(p.logDir, name, "0.log"),
		TerminationMessagePath: "/dev/termination-log",
		Labels:                 map[string]string{"test": "runtimetest"},
	}
	h.Shell(&s, script)
	return s
}

// run creates and starts a container.
func run(t *testing.T, rt runtime.Set, spec runtime.ContainerSpec) string {
	t.Helper()
	id, err := rt.Containers.Create(ctx(t), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := rt.Containers.Start(ctx(t), id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return id
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), WaitLimit)
	t.Cleanup(cancel)
	return c
}

func status(t *testing.T, rt runtime.Set, id string) runtime.Status {
	t.Helper()
	st, err := rt.Containers.Status(ctx(t), id)
	if err != nil {
		t.Fatalf("Status(%s): %v", id, err)
	}
	return st
}

// runLooping runs, in a new pod, a container that sets traps, says
// "ready" and loops until a signal ends it; edit adjusts its spec first.
func runLooping(t *testing.T, h Harness, traps string, edit func(*runtime.ContainerSpec)) (runtime.Set, runtime.ContainerSpec, string) {
	t.Helper()
	rt := h.New(t)
	p := newPod(t, rt)
	spec := p.spec(h, "c", traps+"; echo ready; while :; do sleep 0.1; done")
	if edit != nil {
		edit(&spec)
	}
	id := run(t, rt, spec)
	waitLog(t, spec.LogPath, "ready")
	return rt, spec, id
}

// stop stops id and returns its status, which Stop has recorded by then.
func stop(t *testing.T, rt runtime.Set, id string, grace time.Duration) runtime.Status {
	t.Helper()
	if err := rt.Containers.Stop(ctx(t), id, grace); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	return status(t, rt, id)
}

// waitState waits, through events, until id is in state (or past it);
// events of other containers are skipped.
func waitState(t *testing.T, rt runtime.Set, id string, state runtime.State) runtime.Status {
	t.Helper()
	deadline := time.After(WaitLimit)
	for {
		if st := status(t, rt, id); st.State >= state {
			return st
		}
		select {
		case <-rt.Events:
		case <-deadline:
			t.Fatalf("container %s not %s within %v", id, state, WaitLimit)
		case <-time.After(time.Second): // a status read per second beside the events
		}
	}
}

// waitLog waits until the container's log holds a line with s.
func waitLog(t *testing.T, path, s string) {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for {
		b, _ := os.ReadFile(path)
		if bytes.Contains(b, []byte(s)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log %s has no %q within %v; it holds %q", path, s, WaitLimit, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testSandboxLifecycle(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	st, err := rt.Sandboxes.SandboxStatus(ctx(t), p.sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.SandboxReady || st.PodUID != p.uid || st.PodName != "p" || st.PodNamespace != "default" {
		t.Errorf("status %+v, want ready sandbox of default/p %s", st, p.uid)
	}
	if len(st.IPs) == 0 || st.IPs[0] == "" {
		t.Errorf("sandbox has no IP: %+v", st)
	}
	if st.CreatedAt.IsZero() {
		t.Errorf("sandbox has no creation time")
	}
	list, err := rt.Sandboxes.ListSandboxes(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !containsSandbox(list, p.sandbox) {
		t.Errorf("ListSandboxes does not list %s", p.sandbox)
	}
	if err := rt.Sandboxes.StopSandbox(ctx(t), p.sandbox); err != nil {
		t.Fatal(err)
	}
	if st, err := rt.Sandboxes.SandboxStatus(ctx(t), p.sandbox); err != nil || st.State != runtime.SandboxNotReady {
		t.Errorf("after StopSandbox: %+v, %v; want not ready", st, err)
	}
	if err := rt.Sandboxes.StopSandbox(ctx(t), p.sandbox); err != nil {
		t.Errorf("second StopSandbox: %v", err)
	}
	if err := rt.Sandboxes.RemoveSandbox(ctx(t), p.sandbox); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Sandboxes.SandboxStatus(ctx(t), p.sandbox); !runtime.IsNotFound(err) {
		t.Errorf("SandboxStatus of a removed sandbox: %v, want not found", err)
	}
	list, _ = rt.Sandboxes.ListSandboxes(ctx(t))
	if containsSandbox(list, p.sandbox) {
		t.Errorf("ListSandboxes still lists removed %s", p.sandbox)
	}
}

func containsSandbox(list []runtime.SandboxStatus, id string) bool {
	for _, s := range list {
		if s.ID == id {
			return true
		}
	}
	return false
}

// criLine is one line of the CRI log format: time, stream, tag, message.
var criLine = regexp.MustCompile(`^(\S+) (stdout|stderr) ([FP]) (.*)$`)

func testExitCodeAndLog(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	spec := p.spec(h, "c", "echo out; echo err >&2; exit 3")
	spec.Attempt = 2
	id := run(t, rt, spec)
	st := waitState(t, rt, id, runtime.StateExited)
	if st.ExitCode != 3 || st.Reason == "StartError" {
		t.Errorf("exit %d reason %q, want 3", st.ExitCode, st.Reason)
	}
	if st.ID != id || st.Name != "c" || st.PodUID != p.uid || st.SandboxID != p.sandbox || st.Attempt != 2 {
		t.Errorf("status %+v does not describe the container created", st)
	}
	if st.Labels["test"] != "runtimetest" {
		t.Errorf("labels %v lost the spec's", st.Labels)
	}
	if st.CreatedAt.IsZero() || st.StartedAt.Before(st.CreatedAt) || st.FinishedAt.Before(st.StartedAt) {
		t.Errorf("times created %v started %v finished %v", st.CreatedAt, st.StartedAt, st.FinishedAt)
	}
	if st.LogPath != spec.LogPath {
		t.Errorf("log path %q, want %q", st.LogPath, spec.LogPath)
	}
	waitLog(t, spec.LogPath, "err")
	waitLog(t, spec.LogPath, "out")
	f, err := os.Open(spec.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := criLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Errorf("log line %q is not in the CRI format", sc.Text())
			continue
		}
		if _, err := time.Parse(time.RFC3339Nano, m[1]); err != nil {
			t.Errorf("log line %q: time: %v", sc.Text(), err)
		}
		got[m[4]] = m[2]
	}
	if got["out"] != "stdout" || got["err"] != "stderr" {
		t.Errorf("log lines by stream %v, want out on stdout and err on stderr", got)
	}
	list, err := rt.Containers.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range list {
		found = found || s.ID == id && s.State == runtime.StateExited && s.ExitCode == 3
	}
	if !found {
		t.Errorf("List does not hold %s exited 3", id)
	}
}

// The agent learns of starts and exits from events: a running event, then
// an exited one, for each container.
func testEventsInOrder(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	id := run(t, rt, p.spec(h, "c", "sleep 1; exit 0"))
	var seen []runtime.State
	deadline := time.After(WaitLimit)
	for len(seen) == 0 || seen[len(seen)-1] != runtime.StateExited {
		select {
		case ev := <-rt.Events:
			if ev.ID != id {
				continue
			}
			if ev.PodUID != p.uid || ev.Name != "c" {
				t.Errorf("event %+v does not name the container", ev)
			}
			seen = append(seen, ev.State)
		case <-deadline:
			t.Fatalf("events of %s within %v: %v, want running then exited", id, WaitLimit, seen)
		}
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Errorf("events out of order: %v", seen)
		}
	}
}

// A command that cannot run is no error of Start: the container exits with
// reason StartError and 128, as upstream shows it.
func testStartError(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	spec := p.spec(h, "c", "true")
	spec.Command, spec.Args = []string{"/no/such/command"}, nil
	id, err := rt.Containers.Create(ctx(t), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := rt.Containers.Start(ctx(t), id); err != nil {
		t.Fatalf("Start: %v, want the failure in the status", err)
	}
	st := waitState(t, rt, id, runtime.StateExited)
	if st.Reason != "StartError" || st.ExitCode != 128 || !strings.Contains(st.Message, "/no/such/command") {
		t.Errorf("reason %q exit %d message %q, want StartError 128 naming the command", st.Reason, st.ExitCode, st.Message)
	}
}

func testStopHonoured(t *testing.T, h Harness) {
	rt, spec, id := runLooping(t, h, `trap 'echo bye; exit 0' TERM`, nil)
	begin := time.Now()
	if err := rt.Containers.Stop(ctx(t), id, time.Minute); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > WaitLimit/2 {
		t.Errorf("Stop took %v: it waited for the grace period", d)
	}
	st := status(t, rt, id) // Stop returns once the exit is recorded
	if st.State != runtime.StateExited || st.ExitCode != 0 {
		t.Errorf("%s exit %d, want exited 0 (SIGTERM handled)", st.State, st.ExitCode)
	}
	waitLog(t, spec.LogPath, "bye")
	if err := rt.Containers.Stop(ctx(t), id, time.Minute); err != nil {
		t.Errorf("Stop of an exited container: %v", err)
	}
}

func testStopKillsAfterGrace(t *testing.T, h Harness) {
	rt, _, id := runLooping(t, h, `trap '' TERM`, nil)
	const grace = time.Second
	begin := time.Now()
	if err := rt.Containers.Stop(ctx(t), id, grace); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d < grace {
		t.Errorf("Stop returned after %v, before the grace period", d)
	}
	if st := status(t, rt, id); st.State != runtime.StateExited || st.ExitCode != 137 {
		t.Errorf("%s exit %d, want exited 137 (SIGKILL)", st.State, st.ExitCode)
	}
}

func testStopZeroGrace(t *testing.T, h Harness) {
	rt, _, id := runLooping(t, h, `trap 'exit 0' TERM`, nil)
	if st := stop(t, rt, id, 0); st.State != runtime.StateExited || st.ExitCode != 137 {
		t.Errorf("%s exit %d, want exited 137: grace 0 kills without the stop signal", st.State, st.ExitCode)
	}
}

func testStopSignal(t *testing.T, h Harness) {
	rt, _, id := runLooping(t, h, `trap 'exit 7' USR1; trap 'exit 1' TERM`, func(s *runtime.ContainerSpec) {
		s.StopSignal = syscall.SIGUSR1
	})
	if st := stop(t, rt, id, time.Minute); st.ExitCode != 7 {
		t.Errorf("exit %d, want 7: the spec's stop signal (SIGUSR1) first", st.ExitCode)
	}
}

func testExec(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	id := run(t, rt, p.spec(h, "c", "sleep 300"))
	waitState(t, rt, id, runtime.StateRunning)
	var out, errOut bytes.Buffer
	code, err := rt.Exec.Exec(ctx(t), id, []string{"sh", "-c", "echo hi; echo oops >&2; exit 4"}, &out, &errOut, 10*time.Second)
	if err != nil || code != 4 {
		t.Fatalf("Exec: exit %d, %v; want 4", code, err)
	}
	if out.String() != "hi\n" || errOut.String() != "oops\n" {
		t.Errorf("stdout %q stderr %q", out.String(), errOut.String())
	}
	if _, err := rt.Stats.Usage(ctx(t), id); err != nil {
		t.Errorf("Usage of a running container: %v", err)
	}
	if err := rt.Containers.Stop(ctx(t), id, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Exec.Exec(ctx(t), id, []string{"true"}, nil, nil, time.Second); err == nil {
		t.Errorf("Exec in an exited container succeeded")
	}
}

func testExecTimeout(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	id := run(t, rt, p.spec(h, "c", "sleep 300"))
	waitState(t, rt, id, runtime.StateRunning)
	begin := time.Now()
	_, err := rt.Exec.Exec(ctx(t), id, []string{"sh", "-c", "sleep 60"}, nil, nil, 500*time.Millisecond)
	if !runtime.IsTimeout(err) {
		t.Errorf("Exec past its timeout: %v, want a timeout error", err)
	}
	if d := time.Since(begin); d > WaitLimit/2 {
		t.Errorf("Exec returned after %v", d)
	}
}

func testEnvAndWorkingDir(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	spec := p.spec(h, "c", `echo "FOO=$FOO"; echo "PWD=$(pwd)"`)
	spec.Env = append(spec.Env, "FOO=bar baz")
	spec.WorkingDir = "/tmp"
	id := run(t, rt, spec)
	if st := waitState(t, rt, id, runtime.StateExited); st.ExitCode != 0 {
		t.Fatalf("exit %d", st.ExitCode)
	}
	waitLog(t, spec.LogPath, "FOO=bar baz")
	waitLog(t, spec.LogPath, "PWD=/tmp")
}

func testTerminationMessage(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	id := run(t, rt, p.spec(h, "c", "printf 'last words' > /dev/termination-log; exit 1"))
	st := waitState(t, rt, id, runtime.StateExited)
	if st.TerminationMessageFile == "" {
		t.Fatal("no termination message file")
	}
	b, err := os.ReadFile(st.TerminationMessageFile)
	if err != nil || string(b) != "last words" {
		t.Errorf("termination message %q, %v", b, err)
	}
}

// An agent restart leaves containers running: the new runtime value lists
// them with the same ID and stops them.
func testReadoptRunning(t *testing.T, h Harness) {
	rt, spec, id := runLooping(t, h, `trap 'exit 0' TERM`, nil)
	before := status(t, rt, id)
	rt = h.Restart(t, rt, func() {})
	st := status(t, rt, id)
	if st.State != runtime.StateRunning || !st.StartedAt.Equal(before.StartedAt) || st.Attempt != before.Attempt {
		t.Errorf("after restart %+v, want the same running container", st)
	}
	sbs, err := rt.Sandboxes.ListSandboxes(ctx(t))
	if err != nil || !containsSandbox(sbs, spec.SandboxID) {
		t.Errorf("sandbox %s not listed after restart (%v)", spec.SandboxID, err)
	}
	if st := stop(t, rt, id, time.Minute); st.State != runtime.StateExited || st.ExitCode != 0 {
		t.Errorf("%s exit %d after stop by the new runtime", st.State, st.ExitCode)
	}
}

// An exit while no agent ran is kept and reported to the next one.
func testExitWhileAway(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	spec := p.spec(h, "c", "echo ready; sleep 1; echo done; exit 5")
	id := run(t, rt, spec)
	waitLog(t, spec.LogPath, "ready")
	rt = h.Restart(t, rt, func() {
		// "done" is the last thing before the exit; the exit itself cannot
		// be seen without a runtime, hence the margin.
		waitLog(t, spec.LogPath, "done")
		time.Sleep(500 * time.Millisecond)
	})
	st := waitState(t, rt, id, runtime.StateExited)
	if st.ExitCode != 5 {
		t.Errorf("exit %d, want 5", st.ExitCode)
	}
}

// A container created by an agent that died before starting it, stopped by
// the next (its pod is being deleted): it ends, exited 137, and stays so
// across a restart; it is never started afterwards. A stop that left it
// created would keep its pod from ever ending.
func testStopBeforeStart(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	id, err := rt.Containers.Create(ctx(t), p.spec(h, "c", "sleep 300"))
	if err != nil {
		t.Fatal(err)
	}
	rt = h.Restart(t, rt, func() {})
	if st := status(t, rt, id); st.State != runtime.StateCreated {
		t.Fatalf("re-adopted as %s, want created", st.State)
	}
	if err := rt.Containers.Stop(ctx(t), id, time.Second); err != nil {
		t.Fatalf("Stop of a created container: %v", err)
	}
	st := status(t, rt, id)
	if st.State != runtime.StateExited || st.ExitCode != 137 || !st.StartedAt.IsZero() {
		t.Fatalf("after Stop: %s exit %d started %v, want exited 137, never started", st.State, st.ExitCode, st.StartedAt)
	}
	if err := rt.Containers.Start(ctx(t), id); err == nil {
		if st := status(t, rt, id); st.State != runtime.StateExited {
			t.Errorf("started after it was stopped: %s", st.State)
		}
	}
	rt = h.Restart(t, rt, func() {})
	if st := status(t, rt, id); st.State != runtime.StateExited || st.ExitCode != 137 {
		t.Errorf("after a restart: %s exit %d, want still exited 137", st.State, st.ExitCode)
	}
}

func testRemoveSandbox(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	running := run(t, rt, p.spec(h, "a", "sleep 300"))
	exited := run(t, rt, p.spec(h, "b", "exit 0"))
	waitState(t, rt, running, runtime.StateRunning)
	waitState(t, rt, exited, runtime.StateExited)
	if err := rt.Sandboxes.StopSandbox(ctx(t), p.sandbox); err != nil {
		t.Fatal(err)
	}
	if st := status(t, rt, running); st.State != runtime.StateExited {
		t.Errorf("container %s after StopSandbox, want exited", st.State)
	}
	if err := rt.Sandboxes.RemoveSandbox(ctx(t), p.sandbox); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{running, exited} {
		if _, err := rt.Containers.Status(ctx(t), id); !runtime.IsNotFound(err) {
			t.Errorf("container %s after RemoveSandbox: %v, want not found", id, err)
		}
	}
}

func testNotFound(t *testing.T, h Harness) {
	rt := h.New(t)
	p := newPod(t, rt)
	id := run(t, rt, p.spec(h, "c", "exit 0"))
	waitState(t, rt, id, runtime.StateExited)
	if err := rt.Containers.Remove(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	// A removed ID and one that never existed (in the runtime's own format).
	for _, gone := range []string{id, strings.Repeat("0", len(id))} {
		if _, err := rt.Containers.Status(ctx(t), gone); !runtime.IsNotFound(err) {
			t.Errorf("Status(%s): %v", gone, err)
		}
		if err := rt.Containers.Start(ctx(t), gone); !runtime.IsNotFound(err) {
			t.Errorf("Start(%s): %v", gone, err)
		}
		if err := rt.Containers.Stop(ctx(t), gone, 0); !runtime.IsNotFound(err) {
			t.Errorf("Stop(%s): %v", gone, err)
		}
		if err := rt.Containers.Remove(ctx(t), gone); !runtime.IsNotFound(err) {
			t.Errorf("Remove(%s): %v", gone, err)
		}
		if _, err := rt.Exec.Exec(ctx(t), gone, []string{"true"}, nil, nil, time.Second); !runtime.IsNotFound(err) {
			t.Errorf("Exec(%s): %v", gone, err)
		}
		if _, err := rt.Stats.Usage(ctx(t), gone); !runtime.IsNotFound(err) {
			t.Errorf("Usage(%s): %v", gone, err)
		}
	}
	if _, err := rt.Sandboxes.SandboxStatus(ctx(t), strings.Repeat("0", len(p.sandbox))); !runtime.IsNotFound(err) {
		t.Errorf("SandboxStatus of an unknown sandbox: %v", err)
	}
	list, _ := rt.Containers.List(ctx(t))
	for _, s := range list {
		if s.ID == id {
			t.Errorf("List still holds removed %s", id)
		}
	}
}
