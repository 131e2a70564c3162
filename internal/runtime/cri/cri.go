// Package cri runs pod sandboxes and containers on any CRI v1 endpoint
// (containerd 2.x, CRI-O) the way a kubelet drives one: sandboxes and
// containers with the configs, labels and annotations a kubelet gives, so
// that the runtime applies the image's entrypoint, cmd, user and stop
// signal by Kubernetes' rules.
//
// State changes reach the agent from the runtime's event stream
// (GetContainerEvents) when it has one, and always from a relist every
// Config.RelistPeriod: a lost event delays an exit, it never loses it.
//
// What CRI does not keep and the agent needs after a restart is kept in
// the runtime's own objects: the sandbox's spec in a sandbox annotation
// (CreateContainer needs the sandbox's config), a container's sandbox,
// termination message file and stop signal in container annotations.
package cri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	internalapi "k8s.io/cri-api/pkg/apis"
	criclient "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Config of a Runtime.
type Config struct {
	// Endpoint of the CRI runtime: "unix:///path/to/socket" or a socket path.
	Endpoint string
	// StateDir holds the host files this runtime bind-mounts into
	// containers (termination messages), e.g. DATA/agent/cri.
	StateDir string
	// HostIPs are the node's addresses: the IPs of a host-network sandbox.
	// Default 127.0.0.1.
	HostIPs []string
	// RelistPeriod is how often the containers are listed to catch state
	// changes the event stream missed (or all of them, on a runtime without
	// one). Default 1s, the kubelet's relist period.
	RelistPeriod time.Duration
	// RequestTimeout bounds each CRI call (a stop: its grace plus this).
	// Default 2m, the kubelet's runtimeRequestTimeout.
	RequestTimeout time.Duration
	// MakeConcurrency bounds the sandbox and container creations and
	// starts, and the sandbox teardowns, in flight at once (see gate).
	// Default 2 per CPU (at least 4); negative: no bound.
	MakeConcurrency int
	// ExitKept, if set, is the exit of container id kept outside the CRI
	// (podvisor's shim keeps it when the task is deleted): it stands in
	// for an exit the CRI reports lost (255, Unknown), as an early exit
	// does. ok is false when none is kept.
	ExitKept func(id string) (status uint32, at time.Time, ok bool)
	Clock    clock.WithTicker
	Log      *slog.Logger
}

// Runtime implements every concern of runtime.Set over CRI (see Set).
type Runtime struct {
	cfg    Config
	rs     internalapi.RuntimeService
	is     internalapi.ImageManagerService
	info   runtime.Info
	log    *slog.Logger
	clock  clock.WithTicker
	events *tracker
	gate   *gate // sandbox and container creations and starts

	ctx       context.Context // ends at Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	relist    chan struct{} // capacity 1: "relist now"

	mu         sync.Mutex
	sandboxes  map[string]*sandboxEntry
	containers map[string]containerMeta
	early      map[string]earlyExit // exits the CRI does not report yet (exits.go)
}

var (
	_ runtime.Containers  = (*Runtime)(nil)
	_ runtime.Sandboxes   = (*Runtime)(nil)
	_ runtime.Executor    = (*Runtime)(nil)
	_ runtime.Stats       = (*Runtime)(nil)
	_ runtime.Images      = (*Runtime)(nil)
	_ runtime.Streamer    = (*Runtime)(nil)
	_ runtime.LogReopener = (*Runtime)(nil)
)

// New connects to the endpoint, checks that it speaks CRI v1, learns the
// containers it already runs (an earlier agent's: they are re-adopted,
// their later changes reported as events) and starts watching for changes.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("cri runtime: no endpoint")
	}
	if cfg.StateDir == "" {
		return nil, errors.New("cri runtime: no state directory")
	}
	if strings.HasPrefix(cfg.Endpoint, "/") {
		cfg.Endpoint = "unix://" + cfg.Endpoint
	}
	if len(cfg.HostIPs) == 0 {
		cfg.HostIPs = []string{"127.0.0.1"}
	}
	if cfg.RelistPeriod <= 0 {
		cfg.RelistPeriod = time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 2 * time.Minute
	}
	if cfg.MakeConcurrency == 0 {
		cfg.MakeConcurrency = max(4, 2*goruntime.NumCPU())
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("cri runtime: %w", err)
	}
	qctx := quiet(ctx)
	rs, err := criclient.NewRemoteRuntimeService(qctx, cfg.Endpoint, cfg.RequestTimeout, nil, false)
	if err != nil {
		return nil, classify(err, "cri runtime %s", cfg.Endpoint)
	}
	is, err := criclient.NewRemoteImageService(qctx, cfg.Endpoint, cfg.RequestTimeout, nil, false)
	if err != nil {
		rs.Close(qctx)
		return nil, classify(err, "cri image service %s", cfg.Endpoint)
	}
	v, err := rs.Version(qctx, "v1")
	if err != nil {
		rs.Close(qctx)
		is.Close(qctx)
		return nil, classify(err, "cri runtime %s: version", cfg.Endpoint)
	}
	r := &Runtime{
		cfg:        cfg,
		rs:         rs,
		is:         is,
		info:       runtime.Info{Name: v.RuntimeName, Version: strings.TrimPrefix(v.RuntimeVersion, "v")},
		log:        cfg.Log.With("runtime", v.RuntimeName),
		clock:      cfg.Clock,
		events:     newTracker(),
		gate:       newGate(cfg.MakeConcurrency),
		relist:     make(chan struct{}, 1),
		sandboxes:  map[string]*sandboxEntry{},
		containers: map[string]containerMeta{},
		early:      map[string]earlyExit{},
	}
	if err := r.loadEarlyExits(); err != nil {
		r.Close()
		return nil, fmt.Errorf("cri runtime: %w", err)
	}
	if err := r.seed(ctx); err != nil {
		r.Close()
		return nil, err
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Add(2)
	go r.relistLoop()
	go r.streamEvents()
	r.log.Info("cri runtime connected", "endpoint", cfg.Endpoint, "version", r.info.Version, "api", v.RuntimeApiVersion)
	return r, nil
}

// Close stops watching the runtime and closes the connection; containers
// keep running and a later New on the same endpoint re-adopts them.
// Events is not closed.
func (r *Runtime) Close() {
	r.closeOnce.Do(func() {
		if r.cancel != nil {
			r.cancel()
		}
		r.wg.Wait()
		r.events.close()
		ctx := quiet(context.Background())
		r.rs.Close(ctx)
		r.is.Close(ctx)
	})
}

// quiet keeps the CRI client from logging each failed call through klog:
// every error is returned, classified, to a caller who decides.
func quiet(ctx context.Context) context.Context {
	return klog.NewContext(ctx, logr.Discard())
}

// Set is every concern: a CRI runtime runs images in containers of their
// own, with a network of the pod's own, and serves their sessions. Info
// names the runtime as it names itself: container IDs show as
// "containerd://<id>", as under a kubelet.
func (r *Runtime) Set() runtime.Set {
	return runtime.Set{
		Info:       r.info,
		Features:   runtime.Features{Mounts: true, Limits: true, Users: true, PodNetwork: true, Security: true},
		Containers: r, Sandboxes: r, Exec: r, Stats: r, Events: r.Events(),
		Images: r, Streams: r, Logs: r,
	}
}

// Events delivers a StateRunning event when a container started and a
// StateExited event when it exited (StartError included). Events are
// coalesced per container and never dropped: a container whose events were
// not received meanwhile gets one, with its latest state.
func (r *Runtime) Events() <-chan runtime.Event { return r.events.out }

// terminationDir holds the termination message files of a sandbox's containers.
func (r *Runtime) terminationDir(sandboxID string) string {
	return filepath.Join(r.cfg.StateDir, "sandboxes", sandboxID)
}
