package logrotate

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/podvisor/podvisor/internal/runtime"
)

// fakeRuntime lists fixed containers; ReopenContainerLog creates the log
// file, as a runtime opening its log path does, or fails with failReopen.
type fakeRuntime struct {
	list       []runtime.Status
	failReopen error
	mu         sync.Mutex
	reopened   []string
}

func (f *fakeRuntime) List(context.Context) ([]runtime.Status, error) { return f.list, nil }

func (f *fakeRuntime) ReopenContainerLog(_ context.Context, id string) error {
	f.mu.Lock()
	f.reopened = append(f.reopened, id)
	f.mu.Unlock()
	if f.failReopen != nil {
		return f.failReopen
	}
	for _, st := range f.list {
		if st.ID == id {
			return os.WriteFile(st.LogPath, nil, 0o640)
		}
	}
	return runtime.ErrNotFound
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
}

func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newManager(t *testing.T, rt *fakeRuntime, clk *clocktesting.FakeClock, p Policy) *Manager {
	t.Helper()
	m, err := New(Config{Runtime: rt, Policy: p, Workers: 2, Interval: 10 * time.Second, Clock: clk, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A running container's full log is rotated: the previous rotated file
// gzipped (same content), the oldest beyond MaxFiles removed, the log
// renamed with the time and reopened. An exited container's is left alone.
func TestRotateOnceRunningOnly(t *testing.T) {
	dir, exitedDir := t.TempDir(), t.TempDir()
	log, exitedLog := filepath.Join(dir, "0.log"), filepath.Join(exitedDir, "0.log")
	write(t, log, "0123456789")
	write(t, log+".20261128-170000.gz", "old")
	write(t, log+".20261128-170001", "previous")
	write(t, exitedLog, "0123456789")
	rt := &fakeRuntime{list: []runtime.Status{
		{ID: "run", State: runtime.StateRunning, LogPath: log},
		{ID: "gone", State: runtime.StateExited, LogPath: exitedLog},
	}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 18, 0, 0, 0, time.Local))
	m := newManager(t, rt, clk, Policy{MaxSize: 10, MaxFiles: 3})
	if err := m.RotateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"0.log", "0.log.20261128-170001.gz", "0.log.20261128-180000"}
	if got := names(t, dir); !slices.Equal(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	if got := gunzip(t, log+".20261128-170001.gz"); got != "previous" {
		t.Errorf("compressed file holds %q, want %q", got, "previous")
	}
	if b, _ := os.ReadFile(log + ".20261128-180000"); string(b) != "0123456789" {
		t.Errorf("rotated file holds %q", b)
	}
	if !slices.Equal(rt.reopened, []string{"run"}) {
		t.Errorf("reopened %v, want only the running container", rt.reopened)
	}
	if got := names(t, exitedDir); !slices.Equal(got, []string{"0.log"}) {
		t.Errorf("exited container's files %v, want untouched", got)
	}

	// Below the size on the next round: nothing happens.
	clk.Step(10 * time.Second)
	write(t, log, "short")
	if err := m.RotateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, want) {
		t.Errorf("files %v after a round below the size, want %v", got, want)
	}
}

// A failed reopen renames the log back, so nothing is lost and the next
// round tries again.
func TestRotateRenamesBackWhenReopenFails(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "1.log")
	write(t, log, "0123456789")
	rt := &fakeRuntime{list: []runtime.Status{{ID: "c", State: runtime.StateRunning, LogPath: log}}, failReopen: errors.New("shim gone")}
	m := newManager(t, rt, clocktesting.NewFakeClock(time.Now()), Policy{MaxSize: 5, MaxFiles: 5})
	if err := m.RotateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"1.log"}) {
		t.Errorf("files %v, want the log back in place", got)
	}
	if b, _ := os.ReadFile(log); string(b) != "0123456789" {
		t.Errorf("log holds %q", b)
	}
}

// A running container without its log file (an earlier reopen failed after
// the rename) gets it back through a reopen, as upstream.
func TestMissingLogIsReopened(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "0.log")
	rt := &fakeRuntime{list: []runtime.Status{{ID: "c", State: runtime.StateRunning, LogPath: log}}}
	m := newManager(t, rt, clocktesting.NewFakeClock(time.Now()), Policy{MaxSize: 5, MaxFiles: 5})
	if err := m.RotateOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(log); err != nil || !slices.Equal(rt.reopened, []string{"c"}) {
		t.Errorf("log %v, reopened %v", err, rt.reopened)
	}
}

// Run rotates at once, then on each tick of the interval.
func TestRunRotatesEveryInterval(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "0.log")
	write(t, log, "0123456789")
	rt := &fakeRuntime{list: []runtime.Status{{ID: "c", State: runtime.StateRunning, LogPath: log}}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 28, 18, 0, 0, 0, time.Local))
	m := newManager(t, rt, clk, Policy{MaxSize: 5, MaxFiles: 5})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute)
	waitFor := func(name, what string) {
		for {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s; files %v", what, names(t, dir))
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("0.log.20261128-180000", "rotation at start")
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("Run never waited on its ticker")
		}
		time.Sleep(time.Millisecond)
	}
	write(t, log, "0123456789")
	clk.Step(10 * time.Second)
	waitFor("0.log.20261128-180010", "rotation after a tick")
}

func TestNewRefusesOneFile(t *testing.T) {
	_, err := New(Config{Runtime: &fakeRuntime{}, Policy: Policy{MaxSize: 1, MaxFiles: 1}, Interval: time.Second})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("must be > 1")) {
		t.Errorf("err = %v", err)
	}
}
