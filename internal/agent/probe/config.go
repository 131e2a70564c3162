package probe

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/podvisor/podvisor/internal/agent/timeline"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/cli/version"
)

// ExecFunc runs cmd in the container's context, killing it after timeout.
// output is its combined stdout and stderr; exitCode 0 is success. err != nil
// means the command did not complete: when it timed out, err must be of
// the runtime's class runtime.ErrTimeout (runtime.IsTimeout, which takes
// context.DeadlineExceeded too; or implement Timeout() bool returning true)
// and the probe counts as a Failure; any other
// error (the command could not be started, e.g. not found) makes the probe
// Unknown, as upstream with a CRI runtime.
type ExecFunc func(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (output []byte, exitCode int, err error)

// Update is one container's new verdict.
type Update struct {
	PodUID      types.UID
	Container   string
	ContainerID string
	State       lifecycle.ProbeState
}

// Timeline is where probe result changes are recorded (timeline.Recorder).
type Timeline interface {
	Record(pod timeline.Pod, entries ...timeline.Entry)
}

// Config of the probe manager.
type Config struct {
	Exec     ExecFunc             // required
	Recorder record.EventRecorder // required
	Clock    clock.Clock          // nil: the real clock
	// Timeline, optional, gets each change of a probe's result (success,
	// failure, unknown) with how many runs the previous result lasted.
	Timeline Timeline
	// OnUpdate is called whenever a container's ProbeState changes, with its
	// latest state. Calls come from one goroutine, never while the manager
	// holds a lock; a burst of changes may be coalesced into one call. It
	// must not block long.
	OnUpdate func(Update)
	Log      *slog.Logger
	// KubeMinorVersion is "<major>.<minor>" for the User-Agent
	// "kube-probe/<major>.<minor>"; empty: the embedded Kubernetes version.
	KubeMinorVersion string
	// Workers bounds how many probes run at once; 0: 64.
	Workers int
	// Jitter returns a delay in [0, period) for the first run of a
	// re-adopted container; nil: uniformly random.
	Jitter func(period time.Duration) time.Duration
	// ObserveDelay, if set, is called as each probe run starts with how late
	// it starts relative to its schedule (for metrics and benchmarks).
	ObserveDelay func(time.Duration)
}

const defaultWorkers = 64

func (cfg *Config) validate() error {
	if cfg.Exec == nil || cfg.Recorder == nil {
		return fmt.Errorf("probe: Exec and Recorder are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.OnUpdate == nil {
		cfg.OnUpdate = func(Update) {}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.KubeMinorVersion == "" {
		cfg.KubeMinorVersion = minorVersion(version.Kubernetes)
	}
	if cfg.Workers <= 0 {
		cfg.Workers = defaultWorkers
	}
	if cfg.Jitter == nil {
		cfg.Jitter = func(period time.Duration) time.Duration {
			if period <= 0 {
				return 0
			}
			return rand.N(period)
		}
	}
	return nil
}

// minorVersion turns "v1.36.3" into "1.36".
func minorVersion(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return strings.TrimPrefix(v, "v")
	}
	return parts[0] + "." + parts[1]
}
