package process

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPodvisorBinaryAsShim runs the production path, `podvisor __shim`, when
// PODVISOR_BINARY names a built podvisor (building it here would make this
// package's tests take minutes):
//
//	go build -o /tmp/podvisor ./cmd/podvisor && PODVISOR_BINARY=/tmp/podvisor go test ./internal/runtime/process -run PodvisorBinary
func TestPodvisorBinaryAsShim(t *testing.T) {
	bin := os.Getenv("PODVISOR_BINARY")
	if bin == "" {
		t.Skip("PODVISOR_BINARY not set")
	}
	bin, err := exec.LookPath(bin)
	if err != nil {
		t.Fatal(err)
	}
	bin, _ = filepath.Abs(bin)
	r, err := New(Config{Root: t.TempDir(), ShimBinary: bin, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	spec := testSpec(t, "sh", "-c", "echo hello; exit 5")
	id, err := r.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if st := waitExit(t, r, id); st.ExitCode != 5 {
		t.Errorf("exit %d %q, want 5", st.ExitCode, st.Message)
	}
	waitLog(t, spec.LogPath, " stdout F hello\n")
}
