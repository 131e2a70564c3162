package logrotate

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Runtime is what the manager needs of the container runtime: the
// containers with their state and log path, and reopening a log.
type Runtime interface {
	List(ctx context.Context) ([]runtime.Status, error)
	runtime.LogReopener
}

// Config of a Manager; KubeletConfiguration's containerLog* fields.
type Config struct {
	Runtime Runtime
	Policy  Policy
	// Workers rotate that many containers' logs at once (containerLogMaxWorkers).
	Workers int
	// Interval is how often the logs are looked at (containerLogMonitorInterval).
	Interval time.Duration
	Clock    clock.WithTicker // nil: the real clock
	Log      *slog.Logger
}

// Manager rotates the logs of the running containers every Interval.
type Manager struct {
	cfg Config
}

// reopenTimeout bounds one ReopenContainerLog: a stuck runtime must not stop
// the rotation of every other log.
const reopenTimeout = 30 * time.Second

// New checks cfg (as the kubelet's NewContainerLogManager) and fills defaults.
func New(cfg Config) (*Manager, error) {
	if cfg.Runtime == nil {
		return nil, errors.New("log rotation: no runtime")
	}
	if cfg.Policy.MaxFiles <= 1 {
		return nil, fmt.Errorf("invalid MaxFiles %d, must be > 1", cfg.Policy.MaxFiles)
	}
	if cfg.Workers < 1 {
		cfg.Workers = 1
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("log rotation: interval %s must be positive", cfg.Interval)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Manager{cfg: cfg}, nil
}

// Run rotates logs at once and then every Interval until ctx ends. With a negative MaxSize
// it does nothing (rotation off).
func (m *Manager) Run(ctx context.Context) {
	if m.cfg.Policy.MaxSize < 0 {
		m.cfg.Log.Info("container log rotation is off (containerLogMaxSize is negative)")
		return
	}
	m.cfg.Log.Info("container log rotation", "maxSize", m.cfg.Policy.MaxSize, "maxFiles", m.cfg.Policy.MaxFiles,
		"workers", m.cfg.Workers, "interval", m.cfg.Interval)
	t := m.cfg.Clock.NewTicker(m.cfg.Interval)
	defer t.Stop()
	// A round at once, then one per interval, as upstream's wait.Forever.
	for {
		if err := m.RotateOnce(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Log.Error("container log rotation", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// RotateOnce looks at the log of every running container, Workers at a
// time, and rotates those at MaxSize. Only running containers: an exited
// one writes nothing more, as upstream. An error with one container's log
// is logged and does not stop the others.
func (m *Manager) RotateOnce(ctx context.Context) error {
	list, err := m.cfg.Runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	work := make(chan runtime.Status)
	var wg sync.WaitGroup
	for range m.cfg.Workers {
		wg.Go(func() {
			for st := range work {
				if err := m.rotate(ctx, st); err != nil {
					m.cfg.Log.Error("container log not rotated", "pod", st.PodNamespace+"/"+st.PodName,
						"container", st.Name, "id", st.ID, "path", st.LogPath, "err", err)
				}
			}
		})
	}
	for _, st := range list {
		if st.State != runtime.StateRunning || st.LogPath == "" {
			continue
		}
		select {
		case work <- st:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return ctx.Err()
}

// rotate carries out Plan for one running container.
func (m *Manager) rotate(ctx context.Context, st runtime.Status) error {
	path := st.LogPath
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		// A rotation whose reopen failed after the rename (or an agent that
		// stopped in between) leaves no log: have the runtime open one, as upstream.
		if err := m.reopen(ctx, st.ID); err != nil {
			return fmt.Errorf("the log is missing and could not be reopened: %w", err)
		}
		fi, err = os.Stat(path)
	}
	if err != nil {
		return err
	}
	if fi.Size() < m.cfg.Policy.MaxSize {
		return nil
	}
	rotated, err := rotatedFiles(path)
	if err != nil {
		return err
	}
	a := Plan(path, fi.Size(), rotated, m.cfg.Clock.Now(), m.cfg.Policy)
	for _, f := range a.Remove {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	for _, f := range a.Compress {
		if err := compress(f); err != nil {
			return err
		}
	}
	if a.RotateTo == "" {
		return nil
	}
	if err := os.Rename(path, a.RotateTo); err != nil {
		return err
	}
	if err := m.reopen(ctx, st.ID); err != nil {
		// Renamed back, to be tried again next round.
		if err2 := os.Rename(a.RotateTo, path); err2 != nil {
			return fmt.Errorf("reopen: %w; renaming the log back: %w", err, err2)
		}
		return fmt.Errorf("reopen: %w", err)
	}
	m.cfg.Log.Info("container log rotated", "pod", st.PodNamespace+"/"+st.PodName, "container", st.Name,
		"id", st.ID, "size", fi.Size(), "to", filepath.Base(a.RotateTo), "removed", len(a.Remove), "compressed", len(a.Compress))
	return nil
}

func (m *Manager) reopen(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, reopenTimeout)
	defer cancel()
	return m.cfg.Runtime.ReopenContainerLog(ctx, id)
}

// rotatedFiles lists "<path>.*" in path's directory (read, not globbed: the
// data directory's name may hold pattern characters).
func rotatedFiles(path string) ([]string, error) {
	dir, prefix := filepath.Dir(path), filepath.Base(path)+"."
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// compress writes f gzipped to f.gz, through f.tmp so that a
// compression cut short is recognised (and removed) later, then removes f.
func compress(f string) (err error) {
	in, err := os.Open(f)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	tmp := f + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			out.Close()
			os.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress %s: %w", f, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", f, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", f, err)
	}
	if err := os.Rename(tmp, f+compressSuffix); err != nil {
		return err
	}
	return os.Remove(f)
}
