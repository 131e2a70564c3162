package process

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/internal/runtime"
)

func TestExitCodeIsRecorded(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	for _, tc := range []struct {
		cmd  string
		code int32
	}{{"exit 0", 0}, {"exit 3", 3}} {
		id := run(t, r, testSpec(t, "sh", "-c", tc.cmd))
		waitEvent(t, r, id, runtime.StateRunning)
		st := waitExit(t, r, id)
		if st.State != runtime.StateExited || st.ExitCode != tc.code || st.Signal != 0 || st.Reason != "" {
			t.Errorf("%q: got state %s exit %d signal %d reason %q, want exited %d", tc.cmd, st.State, st.ExitCode, st.Signal, st.Reason, tc.code)
		}
		if st.StartedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) || st.CreatedAt.After(st.StartedAt) {
			t.Errorf("%q: timestamps created %v started %v finished %v", tc.cmd, st.CreatedAt, st.StartedAt, st.FinishedAt)
		}
	}
}

func TestStartedInstanceIsRunningWithPid(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "30"))
	st := status(t, r, id)
	if st.State != runtime.StateRunning || !alive(st.Pid) {
		t.Fatalf("state %s pid %d alive %v, want running", st.State, st.Pid, alive(st.Pid))
	}
	if os.Geteuid() == 0 {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(st.Pid), "cgroup"))
		if !strings.Contains(string(b), "/podvisor/"+id) {
			t.Errorf("main process not in the container cgroup:\n%s", b)
		}
	}
	if err := r.Start(context.Background(), id); err == nil {
		t.Error("second Start succeeded")
	}
}

// Signals the shim ignores or blocks must not be ignored or blocked in the
// container: dispositions set to ignore survive exec.
func TestContainerStartsWithDefaultSignals(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	spec := testSpec(t, "grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status")
	id := run(t, r, spec)
	waitExit(t, r, id)
	for _, e := range readCRILog(t, spec.LogPath) {
		if _, mask, _ := strings.Cut(e.content, ":"); strings.Trim(mask, "\t 0") != "" {
			t.Errorf("container starts with %s", e.content)
		}
	}
}

func TestMissingCommandIsStartError(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "nosuchcmd"))
	st := waitExit(t, r, id)
	want := `exec: "nosuchcmd": executable file not found in $PATH`
	if st.Reason != "StartError" || st.ExitCode != 128 || st.Message != want {
		t.Errorf("got reason %q exit %d message %q, want StartError 128 %q", st.Reason, st.ExitCode, st.Message, want)
	}
}

func TestNotExecutableIsStartError(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	script := filepath.Join(t.TempDir(), "script")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o644)
	id := run(t, r, testSpec(t, script))
	st := waitExit(t, r, id)
	if st.Reason != "StartError" || st.ExitCode != 128 || !strings.Contains(st.Message, "permission denied") {
		t.Errorf("got reason %q exit %d message %q, want StartError 128 permission denied", st.Reason, st.ExitCode, st.Message)
	}
}

func TestEnvIsExactlyTheSpecs(t *testing.T) {
	t.Setenv("PODVISOR_AGENT_ONLY", "leak")
	r := newRuntime(t, t.TempDir())
	spec := testSpec(t, "sh", "-c", "env; echo cwd=$(pwd)")
	spec.Env = []string{"FOO=bar"}
	id := run(t, r, spec)
	st := waitExit(t, r, id)
	b, _ := os.ReadFile(spec.LogPath)
	log := string(b)
	for _, want := range []string{" F FOO=bar\n", " F PATH=" + defaultPath + "\n", " F " + TerminationMessageEnv + "=" + st.TerminationMessageFile + "\n", " F cwd=" + filepath.Join(r.root, id, workDir) + "\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "PODVISOR_AGENT_ONLY") {
		t.Errorf("the agent's environment leaked:\n%s", log)
	}
}

func TestWorkingDirAndPathFromSpec(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	wd := t.TempDir()
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "hello"), []byte("#!/bin/sh\necho hello from $(pwd)\n"), 0o755)
	spec := testSpec(t, "hello")
	spec.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	spec.WorkingDir = wd
	id := run(t, r, spec)
	if st := waitExit(t, r, id); st.ExitCode != 0 {
		t.Fatalf("exit %d %q", st.ExitCode, st.Message)
	}
	waitLog(t, spec.LogPath, " stdout F hello from "+wd+"\n")
}

func TestTerminationMessageFile(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sh", "-c", `echo goodbye > "$`+TerminationMessageEnv+`"; exit 1`))
	st := waitExit(t, r, id)
	if st.TerminationMessageFile == "" || !strings.HasPrefix(st.TerminationMessageFile, r.root) {
		t.Fatalf("termination message file %q not in the instance dir", st.TerminationMessageFile)
	}
	b, err := os.ReadFile(st.TerminationMessageFile)
	if err != nil || string(b) != "goodbye\n" {
		t.Errorf("termination message %q, %v", b, err)
	}
}

func TestUnknownIDIsNotFound(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	ctx := context.Background()
	for _, id := range []string{"0123456789abcdef0123456789abcdef", "../etc", ""} {
		if _, err := r.Status(ctx, id); !isNotFound(err) {
			t.Errorf("Status(%q): %v", id, err)
		}
		if err := r.Start(ctx, id); !isNotFound(err) {
			t.Errorf("Start(%q): %v", id, err)
		}
		if err := r.Stop(ctx, id, 0); !isNotFound(err) {
			t.Errorf("Stop(%q): %v", id, err)
		}
		if err := r.Remove(ctx, id); !isNotFound(err) {
			t.Errorf("Remove(%q): %v", id, err)
		}
		if _, err := r.Exec(ctx, id, []string{"true"}, nil, nil, 0); !isNotFound(err) {
			t.Errorf("Exec(%q): %v", id, err)
		}
	}
}

func TestCreateRefusesNoCommand(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	if _, err := r.Create(context.Background(), testSpec(t)); err == nil {
		t.Fatal("Create without command succeeded")
	}
}

func TestRemoveKeepsTheLog(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	spec := testSpec(t, "sh", "-c", "echo hi; exec sleep 30")
	id := run(t, r, spec)
	waitLog(t, spec.LogPath, "hi")
	pid := status(t, r, id).Pid
	if err := r.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Error("process survived Remove")
	}
	if _, err := os.Stat(filepath.Join(r.root, id)); !os.IsNotExist(err) {
		t.Errorf("instance dir left: %v", err)
	}
	if _, err := os.Stat(spec.LogPath); err != nil {
		t.Errorf("log removed: %v", err)
	}
	if _, err := r.Status(context.Background(), id); !isNotFound(err) {
		t.Errorf("Status after Remove: %v", err)
	}
	if l, _ := r.List(context.Background()); len(l) != 0 {
		t.Errorf("List after Remove: %v", l)
	}
}

// A host process cannot have an image's filesystem mounted: a spec with an
// image volume is refused (the agent refuses it first, naming the field).
func TestCreateRefusesAnImageVolume(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	spec := testSpec(t, "true")
	spec.Mounts = []runtime.Mount{{ContainerPath: "/volume", ReadOnly: true, Image: "sha256:k1773n"}}
	if _, err := r.Create(context.Background(), spec); !runtime.IsInvalid(err) || !strings.Contains(err.Error(), "image volume at /volume") {
		t.Errorf("Create: %v, want ErrInvalid naming the image volume", err)
	}
}
