package process

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

func TestExecRunsInTheContainersContext(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	spec := testSpec(t, "sleep", "30")
	spec.Env = []string{"FOO=bar"}
	id := run(t, r, spec)
	var out bytes.Buffer
	code, err := r.Exec(context.Background(), id, []string{"sh", "-c", "echo $FOO; pwd; exit 4"}, &out, &out, 10*time.Second)
	if err != nil || code != 4 {
		t.Fatalf("exit %d, %v", code, err)
	}
	want := "bar\n" + filepath.Join(r.root, id, workDir) + "\n"
	if out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

func TestExecIsKilledAtTimeout(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "30"))
	var out bytes.Buffer
	begin := time.Now()
	code, err := r.Exec(context.Background(), id, []string{"sh", "-c", "echo started; sleep 30; echo late"}, &out, &out, 300*time.Millisecond)
	if !runtime.IsTimeout(err) || code != -1 {
		t.Fatalf("got exit %d, %v; want -1 and a timeout", code, err)
	}
	if !strings.Contains(err.Error(), "timed out") {
		t.Errorf("error %q does not say it timed out", err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("Exec returned after %v", d)
	}
	if out.String() != "started\n" {
		t.Errorf("output %q", out.String())
	}
}

func TestExecOfMissingCommandFails(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sleep", "30"))
	if code, err := r.Exec(context.Background(), id, []string{"nosuchcmd"}, nil, nil, time.Second); err == nil || code != -1 {
		t.Fatalf("got exit %d, %v", code, err)
	}
}
