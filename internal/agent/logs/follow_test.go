package logs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// deadline bounds every wait in these tests; nothing sleeps to synchronise.
const deadline = 10 * time.Second

// output is a writer whose content can be awaited.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newOutput() *output { return &output{changed: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	close(o.changed)
	o.changed = make(chan struct{})
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output is want.
func (o *output) waitFor(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(deadline)
	for {
		o.mu.Lock()
		got, changed := o.buf.String(), o.changed
		o.mu.Unlock()
		if got == want {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("output is %q, want %q", got, want)
		}
	}
}

// appender writes CRI entries to the log at path, as a runtime would.
func appender(t *testing.T, path string) func(lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	w := NewWriter(f, Stdout, clock.RealClock{})
	return func(lines ...string) {
		for _, l := range lines {
			if _, err := fmt.Fprint(w, l); err != nil {
				t.Error(err)
			}
		}
	}
}

// follow starts ReadLogs with Follow in a goroutine; the returned func waits for its result.
func follow(ctx context.Context, t *testing.T, path string, opts Options, out *output) func() error {
	t.Helper()
	opts.Follow = true
	opts.PollInterval = 5 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- ReadLogs(ctx, path, opts, out) }()
	return func() error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(deadline):
			t.Fatalf("ReadLogs did not return; output %q", out.String())
			return nil
		}
	}
}

func TestFollowStopsWhenExitedAndDrained(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	write := appender(t, path)
	write("before\n")
	var exited atomic.Bool
	out := newOutput()
	wait := follow(context.Background(), t, path, Options{Exited: exited.Load}, out)

	out.waitFor(t, "before\n")
	write("after 1\n", "after ")
	out.waitFor(t, "before\nafter 1\nafter ")
	write("2\n", "last")
	// Exited is reported after the container's last write: everything is read.
	exited.Store(true)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "before\nafter 1\nafter 2\nlast"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestFollowAlreadyExitedReadsAll(t *testing.T) {
	path := writeLog(t, logOf("stdout F a", "stdout F b", "stdout F c"))
	out := newOutput()
	wait := follow(context.Background(), t, path, Options{Exited: func() bool { return true }, TailLines: ptr.To[int64](2)}, out)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "b\nc\n" {
		t.Errorf("got %q", got)
	}
}

func TestFollowReturnsOnCancel(t *testing.T) {
	path := writeLog(t, logOf("stdout F a"))
	ctx, cancel := context.WithCancel(context.Background())
	out := newOutput()
	// No Exited: only the context ends following.
	wait := follow(ctx, t, path, Options{}, out)
	out.waitFor(t, "a\n")
	cancel()
	if err := wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestFollowTailZeroShowsOnlyNewLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	write := appender(t, path)
	write("old\n")
	var exited atomic.Bool
	out := newOutput()
	wait := follow(context.Background(), t, path, Options{TailLines: ptr.To[int64](0), Exited: exited.Load}, out)
	// No signal tells that the reader has reached the end: append until it shows.
	timeout := time.After(deadline)
	for !strings.Contains(out.String(), "new\n") {
		write("new\n")
		select {
		case <-timeout:
			t.Fatal("appended lines never showed")
		case <-time.After(10 * time.Millisecond):
		}
	}
	exited.Store(true)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); strings.Contains(got, "old") {
		t.Errorf("tail 0 showed an old line: %q", got)
	}
}

func TestFollowAcrossRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	write := appender(t, path)
	write("one\n")
	var exited atomic.Bool
	out := newOutput()
	wait := follow(context.Background(), t, path, Options{Exited: exited.Load}, out)
	out.waitFor(t, "one\n")

	write("two\n")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	writeNew := appender(t, path)
	writeNew("three\n")
	out.waitFor(t, "one\ntwo\nthree\n")
	writeNew("four\n")
	exited.Store(true)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "one\ntwo\nthree\nfour\n" {
		t.Errorf("got %q", got)
	}
}

func TestFollowStopsAtLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	write := appender(t, path)
	write("abc\n")
	out := newOutput()
	wait := follow(context.Background(), t, path, Options{LimitBytes: ptr.To[int64](6)}, out)
	write("defgh\n")
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "abc\nde" {
		t.Errorf("got %q", got)
	}
}

func TestReadLogsMissingFile(t *testing.T) {
	err := ReadLogs(context.Background(), filepath.Join(t.TempDir(), "none.log"), Options{}, &bytes.Buffer{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want not exist", err)
	}
}
