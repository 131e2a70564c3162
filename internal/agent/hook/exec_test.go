package hook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func execHook(cmd ...string) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: cmd}}
}

// §7: exec runs in the container's context (the ExecFunc, with the instance's ID).
func TestExecHookRunsInTheContainer(t *testing.T) {
	ex := newLocalExec()
	r := New(Config{Exec: ex.Exec})
	marker := filepath.Join(t.TempDir(), "ran")
	msg, err := r.Run(context.Background(), PostStart, testPod(), &v1.Container{Name: "c"}, "cid", "", execHook("sh", "-c", "echo ran > "+marker), 0)
	if err != nil || msg != "" {
		t.Fatalf("Run = %q, %v; want success", msg, err)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "ran\n" {
		t.Errorf("the command did not run: %q, %v", b, err)
	}
	if call := ex.call(t); call.containerID != "cid" || call.timeout != 0 || len(call.cmd) != 3 {
		t.Errorf("exec got %+v; want container cid, no timeout, the hook's command", call)
	}
}

// §7: a non-zero exit is a failure, with upstream's message.
func TestExecHookNonZeroExitFails(t *testing.T) {
	r := New(Config{Exec: newLocalExec().Exec})
	msg, err := r.Run(context.Background(), PostStart, testPod(), &v1.Container{Name: "c"}, "cid", "", execHook("sh", "-c", "echo boom; exit 3"), 0)
	if err == nil {
		t.Fatal("exit 3 succeeded")
	}
	want := `Exec lifecycle hook ([sh -c echo boom; exit 3]) for Container "c" in Pod "p_ns(uid)" failed - error: command 'sh -c echo boom; exit 3' exited with 3: boom
, message: "boom\n"`
	if msg != want {
		t.Errorf("message\n%s\nwant\n%s", msg, want)
	}
}

// Errors reach users: a command that does not exist fails the hook and says so.
func TestExecHookCommandNotFound(t *testing.T) {
	r := New(Config{Exec: newLocalExec().Exec})
	msg, err := r.Run(context.Background(), PreStop, testPod(), &v1.Container{Name: "c"}, "cid", "", execHook("no-such-command-podvisor"), 0)
	if err == nil {
		t.Fatal("a missing command succeeded")
	}
	prefix := `Exec lifecycle hook ([no-such-command-podvisor]) for Container "c" in Pod "p_ns(uid)" failed - error: `
	if !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, "executable file not found") {
		t.Errorf("message %q does not say the command was not found", msg)
	}
}

func TestExecHookWithoutExecFuncFails(t *testing.T) {
	r := New(Config{})
	if _, err := r.Run(context.Background(), PostStart, testPod(), &v1.Container{Name: "c"}, "cid", "", execHook("true"), 0); err == nil {
		t.Fatal("exec hook without an ExecFunc succeeded")
	}
}

// §8: preStop's time counts against the grace period; past its budget it is cut off.
func TestExecHookPastItsBudgetIsCutOff(t *testing.T) {
	ex := newLocalExec()
	r := New(Config{Exec: ex.Exec})
	begin := time.Now()
	res := await(t, runAsync(context.Background(), r, PreStop, &v1.Container{Name: "c"}, "", execHook("sleep", "30"), 300*time.Millisecond), 10*time.Second)
	if !errorsIsBudget(res.err) {
		t.Fatalf("err %v, want ErrBudgetExceeded", res.err)
	}
	if d := res.at.Sub(begin); d < 300*time.Millisecond {
		t.Errorf("cut off after %v, before its budget", d)
	}
	want := `Exec lifecycle hook ([sleep 30]) for Container "c" in Pod "p_ns(uid)" failed - error: hook did not finish within its time budget of 300ms, message: ""`
	if res.msg != want {
		t.Errorf("message\n%s\nwant\n%s", res.msg, want)
	}
	if call := ex.call(t); call.timeout != 300*time.Millisecond {
		t.Errorf("exec timeout %v, want the budget", call.timeout)
	}
	select {
	case <-ex.returned: // the process was killed, not left behind
	case <-time.After(10 * time.Second):
		t.Fatal("the hook's process still runs")
	}
}
