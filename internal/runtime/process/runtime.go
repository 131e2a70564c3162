// Package process runs containers as host process trees, each supervised by
// a shim (`podvisor __shim <dir>`) that outlives the agent: the shim starts
// the command in its own process group (and, as root, its own cgroup),
// writes its output to the CRI log and records its exit in the instance
// directory. The agent learns of exits from one epoll loop over the shims'
// pidfds and re-adopts running shims when it restarts.
//
// Instance states, recorded in state.json:
//
//	created ──Start──▶ running ──main process exits──▶ exited
//	   └──────Start: command cannot be executed (StartError)──▶ exited
package process

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/cli/version"
	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/eventqueue"
)

// ShimBinaryName is the small shim built beside podvisor (cmd/podvisor-shim).
const ShimBinaryName = "podvisor-shim"

// DefaultShim is the shim to run for the podvisor binary exe: podvisor-shim
// beside it when present (cheap to start, once per container), else exe
// itself as `exe __shim`.
func DefaultShim(exe string) string {
	small := filepath.Join(filepath.Dir(exe), ShimBinaryName)
	if st, err := os.Stat(small); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return small
	}
	return exe
}

// ShimCommand is the podvisor subcommand that runs a shim.
const ShimCommand = "__shim"

// Config of a Runtime.
type Config struct {
	Root       string // state directory, e.g. DATA/agent/containers
	ShimBinary string // the podvisor binary; default os.Executable()
	Clock      clock.Clock
	Log        *slog.Logger
	// NoCgroups runs containers without cgroups even as root, as when not
	// root: orphans are then found through the shim's process tree only.
	NoCgroups bool
	// HostIPs are the node's addresses: every sandbox's IPs, as every pod
	// is on the host network. Default 127.0.0.1.
	HostIPs []string
}

// Runtime runs containers as host processes: every concern of runtime.Set
// but images (see Set).
type Runtime struct {
	root      string
	shim      string
	clock     clock.Clock
	log       *slog.Logger
	noCg      bool // Config.NoCgroups
	hostIPs   []string
	mon       *monitor
	events    *eventqueue.Queue
	closeOnce sync.Once
	closed    chan struct{} // closed by Close: nobody announces exits any more

	mu       sync.Mutex
	watched  map[string]chan struct{} // running instances; closed once their exit is recorded and announced
	starting map[string]bool
	// sandboxOf is each container's sandbox, read once from its config
	// (which never changes): stopping or removing a sandbox finds its
	// containers without reading every container's state.
	sandboxOf map[string]string
}

var (
	_ runtime.Containers  = (*Runtime)(nil)
	_ runtime.Sandboxes   = (*Runtime)(nil)
	_ runtime.Executor    = (*Runtime)(nil)
	_ runtime.Stats       = (*Runtime)(nil)
	_ runtime.LogReopener = (*Runtime)(nil)
)

// errClosed is returned (wrapped) by a Stop that waits on a closed Runtime.
var errClosed = fmt.Errorf("process runtime closed: %w", runtime.ErrUnavailable)

// New opens (creating it if needed) the state directory and re-adopts every
// instance found there: running shims are watched again, exits recorded while
// no agent ran are kept.
func New(cfg Config) (*Runtime, error) {
	if cfg.Root == "" {
		return nil, errors.New("process runtime: no root directory")
	}
	if cfg.ShimBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("process runtime: shim binary: %w", err)
		}
		cfg.ShimBinary = DefaultShim(exe)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if len(cfg.HostIPs) == 0 {
		cfg.HostIPs = []string{"127.0.0.1"}
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	r := &Runtime{
		root:      cfg.Root,
		shim:      cfg.ShimBinary,
		clock:     cfg.Clock,
		log:       cfg.Log,
		noCg:      cfg.NoCgroups,
		hostIPs:   cfg.HostIPs,
		events:    eventqueue.New(),
		watched:   map[string]chan struct{}{},
		starting:  map[string]bool{},
		sandboxOf: map[string]string{},
		closed:    make(chan struct{}),
	}
	mon, err := newMonitor(r.shimExited)
	if err != nil {
		r.events.Close()
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	r.mon = mon
	if f := r.features(); !f.Limits {
		r.log.Warn("resource limits are not enforced: containers run without memory and CPU limits", "root", os.Geteuid() == 0, "noCgroups", cfg.NoCgroups)
	}
	if f := r.features(); !f.Mounts {
		r.log.Warn("not running as root: containers with volume mounts or runAsUser cannot be run and are reported with CreateContainerConfigError")
	}
	ids, err := r.ids()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	r.removeLeftovers()
	for _, id := range ids {
		r.adopt(id)
	}
	return r, nil
}

// Close stops watching shims; the containers keep running and a later New
// on the same Root re-adopts them. Events is not closed.
func (r *Runtime) Close() {
	r.closeOnce.Do(func() {
		close(r.closed)
		r.mon.close()
		r.events.Close()
	})
}

// Events delivers a StateRunning event when an instance started and a
// StateExited event when it exited (StartError included), in that order for
// one instance. The agent must keep receiving; events queue meanwhile and are
// never dropped. Exits of instances re-adopted by New are delivered too.
func (r *Runtime) Events() <-chan runtime.Event { return r.events.Out() }

func (r *Runtime) dir(id string) (instanceDir, error) {
	if !validID(id) {
		return "", fmt.Errorf("container %q: %w", id, runtime.ErrNotFound)
	}
	d := instanceDir(filepath.Join(r.root, id))
	if _, err := os.Stat(d.path(stateFileName)); err != nil {
		return "", fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	return d, nil
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func validID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// ids lists the instance directories under Root.
func (r *Runtime) ids() ([]string, error) {
	entries, err := os.ReadDir(r.root)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && validID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// removeLeftovers deletes what a Create or Remove interrupted by a crash left.
func (r *Runtime) removeLeftovers() {
	entries, _ := os.ReadDir(r.root)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".create-") || strings.HasPrefix(e.Name(), ".remove-") {
			os.RemoveAll(filepath.Join(r.root, e.Name()))
		}
	}
}

func (r *Runtime) Status(_ context.Context, id string) (runtime.Status, error) {
	d, err := r.dir(id)
	if err != nil {
		return runtime.Status{}, err
	}
	st, err := d.status()
	if errors.Is(err, os.ErrNotExist) {
		return runtime.Status{}, fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	if err != nil {
		return runtime.Status{}, fmt.Errorf("container %s: %w", id, err)
	}
	return st, nil
}

func (r *Runtime) List(ctx context.Context) ([]runtime.Status, error) {
	ids, err := r.ids()
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := make([]runtime.Status, 0, len(ids))
	for _, id := range ids {
		st, err := r.Status(ctx, id)
		if errors.Is(err, runtime.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			r.log.Warn("unreadable container state", "id", id, "err", err)
			continue
		}
		out = append(out, st)
	}
	return out, nil
}

// Set is what the process runtime offers: host processes, no images (a
// nil Images). Its interactive sessions, stdin, tty and attach included
// (the shim keeps them), are served by streams (NewStreamServer), which
// the caller runs; without one the set has no Streams.
func (r *Runtime) Set(streams *StreamServer) runtime.Set {
	s := runtime.Set{
		// Container IDs show as podvisor://<id>.
		Info:       runtime.Info{Name: "podvisor", Version: version.Version},
		Features:   r.features(),
		Containers: r, Sandboxes: r, Exec: r, Stats: r, Events: r.Events(), Logs: r,
	}
	if streams != nil {
		s.Streams = streams
	}
	return s
}

// features: mounts (a private mount namespace), limits (cgroups) and users
// need root; limits also need cgroups. Every pod is on the host's network
// with the host's privileges.
func (r *Runtime) features() runtime.Features {
	root := os.Geteuid() == 0
	limits := false
	if root && !r.noCg {
		_, err := selfCgroups()
		limits = err == nil
	}
	return runtime.Features{Mounts: root, Limits: limits, Users: root}
}
