package shutdown

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StateFileName is the file, in the agent's directory, that records the last
// shutdown, as the kubelet's graceful_node_shutdown_state.
const StateFileName = "graceful_node_shutdown_state"

// State is when the last shutdown started and ended (zero: not yet).
type State struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
}

func loadState(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, fmt.Errorf("%s is corrupt: %w", path, err)
	}
	return st, nil
}

// saveState writes atomically: a machine going down mid-write must not leave
// half a file.
func saveState(path string, st State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}

// metrics are the kubelet's gauges: seconds since the epoch, 0 for "not yet".
// The names carry the kubelet subsystem prefix, as upstream exposes them.
type metrics struct {
	start, end prometheus.Gauge

	mu sync.Mutex
	st State
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		start: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "graceful_shutdown_start_time_seconds",
			Help: "Last graceful shutdown start time since unix epoch in seconds",
		}),
		end: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "graceful_shutdown_end_time_seconds",
			Help: "Last graceful shutdown end time since unix epoch in seconds",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.start, m.end} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("shutdown metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) set(st State) {
	m.mu.Lock()
	m.st = st
	m.mu.Unlock()
	m.start.Set(seconds(st.StartTime))
	m.end.Set(seconds(st.EndTime))
}

func (m *metrics) state() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

func seconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

func describeBands(bands []Band) []string {
	var out []string
	for _, b := range bands {
		out = append(out, fmt.Sprintf("priority>=%d:%s", b.Priority, b.Period))
	}
	return out
}
