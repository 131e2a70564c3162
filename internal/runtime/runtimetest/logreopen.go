package runtimetest

import (
	"os"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/internal/runtime"
)

// testReopenLog: log rotation renames a running container's log, then
// ReopenContainerLog makes new output go to a new file at LogPath, and
// nothing to the renamed one; an exited container is a conflict.
func testReopenLog(t *testing.T, h Harness) {
	rt := h.New(t)
	lr := rt.Logs
	if lr == nil {
		t.Fatal("the runtime's set has no Logs: every runtime's container logs can be rotated")
	}
	p := newPod(t, rt)
	// It says "ready", then one numbered line whenever a file appears, so
	// the test decides when output is written.
	dir := t.TempDir()
	spec := p.spec(h, "c", "echo ready; i=0; while :; do if [ -e "+dir+"/go$i ]; then echo line$i; i=$((i+1)); fi; sleep 0.05; done")
	spec.Mounts = append(spec.Mounts, runtime.Mount{HostPath: dir, ContainerPath: dir})
	if !rt.Features.Mounts {
		spec.Mounts = nil
	}
	id := run(t, rt, spec)
	waitLog(t, spec.LogPath, "ready")

	rotated := spec.LogPath + ".20260101-000000"
	if err := os.Rename(spec.LogPath, rotated); err != nil {
		t.Fatal(err)
	}
	if err := lr.ReopenContainerLog(ctx(t), id); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	if _, err := os.Stat(spec.LogPath); err != nil {
		t.Fatalf("after ReopenContainerLog, the log path: %v", err)
	}
	if err := os.WriteFile(dir+"/go0", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitLog(t, spec.LogPath, "line0")
	old, _ := os.ReadFile(rotated)
	if !strings.Contains(string(old), "ready") || strings.Contains(string(old), "line0") {
		t.Errorf("rotated file holds %q, want the output before the rotation only", old)
	}

	stop(t, rt, id, 0)
	if err := lr.ReopenContainerLog(ctx(t), id); !runtime.IsConflict(err) {
		t.Errorf("ReopenContainerLog of an exited container: %v, want a conflict", err)
	}
}
