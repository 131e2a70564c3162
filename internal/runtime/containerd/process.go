// Package containerd runs containerd 2.x as a child process of podvisor,
// k3s-style, and imports images into it. It is the only podvisor package that
// imports containerd's Go module (its subpackage daemon is containerd itself,
// its subpackage shim the runc shim).
//
// The containerd is podvisor's own build, the binary podvisor-containerd
// (./cmd/podvisor-containerd), run as `podvisor-containerd --config
// DATA_DIR/containerd/config.toml`, with the CRI plugin, the runc shim v2
// (the separate binary containerd-shim-runc-v2, built from
// ./cmd/containerd-shim-runc-v2), runc and the CNI plugins from the
// distribution. It dies with podvisor; its containers do not: their shims
// are not its children once started, and a restarted containerd re-adopts
// them from the state directory (see Paths).
package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/host/freeport"
	"github.com/podvisor/podvisor/internal/runtime/containerd/keptexit"
	"github.com/podvisor/podvisor/internal/runtime/pause"
)

// SandboxImage is the pause image of every pod sandbox, pinned: the
// kubelet v1.36's default, which podvisor builds offline if it is missing.
const SandboxImage = pause.ImageName

// ShimBinary is looked for next to podvisor's own executable, then in PATH.
const ShimBinary = "containerd-shim-runc-v2"

// DaemonBinary is containerd (./cmd/podvisor-containerd), looked for next to
// podvisor's own executable, then in PATH.
const DaemonBinary = "podvisor-containerd"

// Options configure Start. Only DataDir is required.
type Options struct {
	// DataDir is podvisor's data directory (see Paths for the layout).
	DataDir string
	// Daemon is the command that runs containerd, given `--config FILE`
	// after it. Default: the DaemonBinary next to this process's executable,
	// then in PATH. (Tests run their own binary with an argument that makes
	// it containerd.)
	Daemon []string
	// Shim is the containerd-shim-runc-v2 binary. Default: next to this
	// process's executable, then in PATH.
	Shim string
	// Runc is the OCI runtime. Default: /usr/sbin/runc, /usr/bin/runc, then
	// PATH (Debian's runc package).
	Runc string
	// CNIBinDirs are searched for the CNI plugins. Default: /usr/lib/cni
	// (Debian's containernetworking-plugins), /opt/cni/bin.
	CNIBinDirs []string
	// PodCIDR, when valid, makes Start write the pod network's CNI config
	// (bridge, host-local on this range, portmap; loopback): the CRI reports
	// NetworkReady only once one exists.
	PodCIDR netip.Prefix
	// ClusterCIDR is the pod network of the whole cluster: what pods send
	// outside it is masqueraded. Default: PodCIDR alone.
	ClusterCIDR netip.Prefix
	// Bridge is the pod network's Linux bridge. Default: pv-<8 hex>, from
	// the same hash as the state directory, so that two podvisors on one
	// machine never share one.
	Bridge string
	// Snapshotter is "overlayfs" or "native". Default: overlayfs if the root
	// directory's file system can hold an overlay mount, else native.
	Snapshotter string
	// StreamPort is the port of the CRI streaming server (exec, attach,
	// port-forward) on 127.0.0.1. Default: a free port.
	StreamPort int
	// Timeout bounds the wait for the CRI to answer. Default: 60s.
	Timeout time.Duration
	// Log receives podvisor's lines about containerd (containerd's own go to
	// Paths.Log). Default: slog.Default().
	Log *slog.Logger
}

// Process is a running containerd, a child of this process.
type Process struct {
	paths       Paths
	snapshotter string
	bridge      string
	cmd         *exec.Cmd
	done        chan struct{}
	err         error // how it exited; set before done is closed
}

// Start starts containerd for o.DataDir and returns once its CRI answers,
// the sandbox image is present and the images folder is imported. It never
// leaves a half-started containerd behind: on any error the child is killed
// and the error names what is missing (root, runc, the shim, the CNI
// plugins, the pause binary) or quotes containerd's log.
func Start(ctx context.Context, o Options) (*Process, error) {
	o, paths, err := o.complete()
	if err != nil {
		return nil, err
	}
	for _, d := range []string{paths.Dir, paths.Root, paths.CNIConfDir, paths.State} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("containerd: %w", err)
		}
	}
	if o.Snapshotter == "" {
		var why error
		if o.Snapshotter, why = chooseSnapshotter(paths.Root); why != nil {
			o.Log.Warn("containerd: overlay mounts do not work here, using the native snapshotter (slower, more disk)", "root", paths.Root, "reason", why)
		}
	}
	if Serving(paths.Socket) {
		return nil, fmt.Errorf("containerd: another containerd already serves %s (a podvisor still running with data dir %s?)", paths.Socket, o.DataDir)
	}
	if o.StreamPort == 0 {
		if o.StreamPort, err = freeport.Pick(); err != nil {
			return nil, fmt.Errorf("containerd: streaming server port: %w", err)
		}
	}
	if o.PodCIDR.IsValid() {
		if err := setUpPodNetwork(paths, o.Bridge, o.PodCIDR, o.ClusterCIDR); err != nil {
			return nil, fmt.Errorf("containerd: %w", err)
		}
	}
	registries, err := ReadRegistries(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("containerd: %w", err)
	}
	if err := writeHostsDir(paths.HostsDir, registries); err != nil {
		return nil, fmt.Errorf("containerd: registry hosts: %w", err)
	}
	for host, m := range registries.Mirrors {
		o.Log.Info("registry mirror", "registry", host, "endpoints", m.Endpoints)
	}
	cfg := config{Paths: paths, Snapshotter: o.Snapshotter, SandboxImage: SandboxImage,
		Runc: o.Runc, Shim: o.Shim, CNIBinDirs: o.CNIBinDirs, StreamPort: o.StreamPort, Auths: registries.auths()}
	if err := writeConfig(cfg); err != nil {
		return nil, fmt.Errorf("containerd: config: %w", err)
	}

	p, err := spawn(o.Daemon, o.Shim, paths, o.Snapshotter)
	if err != nil {
		return nil, err
	}
	p.bridge = o.Bridge
	o.Log.Info("containerd starting", "pid", p.cmd.Process.Pid, "socket", paths.Socket, "snapshotter", o.Snapshotter, "log", paths.Log)
	if err := p.setUp(ctx, o); err != nil {
		p.kill()
		return nil, err
	}
	o.Log.Info("containerd ready", "pid", p.cmd.Process.Pid, "endpoint", p.Endpoint())
	return p, nil
}

// setUp waits for the CRI and makes the images the node needs present.
func (p *Process) setUp(ctx context.Context, o Options) error {
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := p.waitCRI(wctx); err != nil {
		return err
	}
	c, err := dial(ctx, p.paths.Socket, p.snapshotter)
	if err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	defer c.Close()
	c.removeStrayShims(ctx, p.paths.Socket, o.Log)
	if err := c.ensureSandboxImage(ctx); err != nil {
		return err
	}
	for _, r := range c.ImportDir(ctx, p.paths.Images) {
		if r.Err != nil {
			o.Log.Error("image import failed", "file", r.File, "err", r.Err)
			continue
		}
		for _, img := range r.Images {
			o.Log.Info("image imported", "file", r.File, "image", img.Name, "digest", img.Digest)
		}
	}
	return nil
}

// complete fills in defaults and checks every piece containerd will need,
// so that a missing one is reported before anything starts.
func (o Options) complete() (Options, Paths, error) {
	paths, err := PathsFor(o.DataDir)
	if err != nil {
		return o, paths, err
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	if os.Geteuid() != 0 {
		return o, paths, errors.New("containerd needs root: run podvisor as root")
	}
	exe, err := os.Executable()
	if err != nil {
		return o, paths, err
	}
	if len(o.Daemon) == 0 {
		daemon, err := findBeside(exe, DaemonBinary)
		if err != nil {
			return o, paths, fmt.Errorf("%w (build it: go build -o bin/ ./cmd/podvisor-containerd)", err)
		}
		o.Daemon = []string{daemon}
	} else if !isExecutable(o.Daemon[0]) {
		return o, paths, fmt.Errorf("containerd %s is not an executable file", o.Daemon[0])
	}
	if o.Runc == "" {
		if o.Runc, err = findRunc(); err != nil {
			return o, paths, err
		}
	}
	if o.Shim == "" {
		if o.Shim, err = findBeside(exe, ShimBinary); err != nil {
			return o, paths, fmt.Errorf("%w (build it: go build -o bin/ ./cmd/containerd-shim-runc-v2)", err)
		}
	} else if !isExecutable(o.Shim) {
		return o, paths, fmt.Errorf("the runc shim %s is not an executable file", o.Shim)
	}
	if !isExecutable(o.Runc) {
		return o, paths, fmt.Errorf("runc %s is not an executable file (Debian: apt-get install runc)", o.Runc)
	}
	if len(o.CNIBinDirs) == 0 {
		o.CNIBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}
	}
	if _, err := findCNIPlugins(o.CNIBinDirs); err != nil {
		return o, paths, err
	}
	if o.Bridge == "" {
		o.Bridge = paths.DefaultBridge()
	}
	return o, paths, nil
}

// DefaultBridge is the pod network's bridge unless Options.Bridge says
// otherwise: pv-<8 hex>, a name per data directory, within the 15 bytes of
// a Linux interface name.
func (p Paths) DefaultBridge() string {
	return "pv-" + strings.TrimPrefix(filepath.Base(p.State), "containerd-")[:8]
}

func findRunc() (string, error) {
	for _, p := range []string{"/usr/sbin/runc", "/usr/bin/runc"} {
		if isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath("runc"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("runc not found in /usr/sbin, /usr/bin or PATH (Debian: apt-get install runc)")
}

// findBeside finds the binary name next to exe (how podvisor's own binaries
// are installed, in bin/), else in PATH.
func findBeside(exe, name string) (string, error) {
	if p := filepath.Join(filepath.Dir(exe), name); isExecutable(p) {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("%s not found next to %s or in PATH", name, exe)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// Serving reports whether something accepts connections on the socket.
func Serving(socket string) bool {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func spawn(daemon []string, shim string, paths Paths, snapshotter string) (*Process, error) {
	logf, err := os.OpenFile(paths.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("containerd: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "\n--- podvisor starts containerd at %s\n", time.Now().Format(time.RFC3339))
	cmd := exec.Command(daemon[0], append(daemon[1:len(daemon):len(daemon)], "--config", paths.Config)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = withoutEnv(os.Environ(), "NOTIFY_SOCKET", "PATH") // its readiness is not podvisor's
	// The shim's directory first in PATH: containerd starts new shims from
	// the configured runtime_path, but after a restart it reconnects to the
	// running ones by the runtime's name (containerd-shim-runc-v2 in PATH or
	// beside its own binary); without it, every container that outlived a
	// containerd restart would be lost (its exit read as 255/Unknown).
	path := filepath.Dir(shim)
	if p := os.Getenv("PATH"); p != "" {
		path += string(os.PathListSeparator) + p
	}
	cmd.Env = append(cmd.Env, "PATH="+path)
	// Its shims inherit it: where they keep exits (ExitKept).
	cmd.Env = append(withoutEnv(cmd.Env, keptexit.Env), keptexit.Env+"="+paths.KeptExits)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Dies with podvisor, as in k3s; the containers' shims are not its
		// children and live on. (Pdeathsig follows the OS thread that
		// forked: Start must not run on a goroutine that locks its thread
		// and then ends.) Its own process group keeps a terminal's
		// Ctrl-C to podvisor, which stops it in order.
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("containerd: %w", err)
	}
	p := &Process{paths: paths, snapshotter: snapshotter, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func withoutEnv(env []string, names ...string) []string {
	out := env[:0:0]
next:
	for _, kv := range env {
		for _, name := range names {
			if strings.HasPrefix(kv, name+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// waitCRI returns once the CRI answers Version and reports the runtime
// ready, or with an error quoting containerd's log if it exits or ctx ends.
func (p *Process) waitCRI(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var rs criapi.RuntimeService
	defer func() {
		if rs != nil {
			rs.Close(context.Background())
		}
	}()
	var last error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("containerd exited during start-up (%v): %s", p.err, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("containerd's CRI did not become ready (%v): %v; %s", ctx.Err(), last, p.logTail())
		case <-tick.C:
		}
		if rs == nil {
			if !Serving(p.paths.Socket) {
				continue
			}
			s, err := criclient.NewRemoteRuntimeService(ctx, p.paths.Endpoint(), 10*time.Second, noop.NewTracerProvider(), false)
			if err != nil {
				last = err
				continue
			}
			rs = s
		}
		if _, err := rs.Version(ctx, "v1"); err != nil {
			last = err
			continue
		}
		st, err := rs.Status(ctx, false)
		if err != nil {
			last = err
			continue
		}
		if c := condition(st, runtimeapi.RuntimeReady); c == nil || !c.Status {
			last = fmt.Errorf("CRI runtime not ready: %v", c)
			continue
		}
		return nil
	}
}

// SetPodCIDR writes the pod network's CNI config for podCIDR (the node's
// spec.podCIDR, known once the node is registered) and returns once the
// CRI reports the network ready, so that no sandbox is refused for want of
// it. What pods send outside clusterCIDR (podCIDR when invalid) is
// masqueraded. Writing the same CIDRs again is harmless.
func (p *Process) SetPodCIDR(ctx context.Context, podCIDR, clusterCIDR netip.Prefix) error {
	if err := setUpPodNetwork(p.paths, p.bridge, podCIDR, clusterCIDR); err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	rs, err := criclient.NewRemoteRuntimeService(ctx, p.paths.Endpoint(), 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	defer rs.Close(context.Background())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := rs.Status(ctx, false)
		if err == nil {
			if c := condition(st, runtimeapi.NetworkReady); c != nil && c.Status {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("containerd exited (%v): %s", p.err, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("containerd: the pod network did not become ready: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

func condition(st *runtimeapi.StatusResponse, t string) *runtimeapi.RuntimeCondition {
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == t {
			return c
		}
	}
	return nil
}

// logTail returns the end of containerd's log, where it says why it failed.
func (p *Process) logTail() string {
	b, err := os.ReadFile(p.paths.Log)
	if err != nil {
		return "no log: " + err.Error()
	}
	if i := bytes.LastIndex(b, []byte("\n--- podvisor starts containerd")); i >= 0 {
		b = b[i+1:]
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return fmt.Sprintf("last lines of %s:\n%s", p.paths.Log, strings.Join(lines, "\n"))
}

// Paths are this containerd's paths.
func (p *Process) Paths() Paths { return p.paths }

// Endpoint is the CRI endpoint ("unix://…").
func (p *Process) Endpoint() string { return p.paths.Endpoint() }

// Snapshotter is the snapshotter the CRI uses.
func (p *Process) Snapshotter() string { return p.snapshotter }

// Pid is containerd's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when containerd has exited, for whatever reason.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how containerd exited; valid once Done is closed.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Stop stops containerd (SIGTERM, then SIGKILL when ctx ends) and waits for
// it to exit. Containers keep running; the next Start re-adopts them.
func (p *Process) Stop(ctx context.Context) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("containerd did not stop on SIGTERM (%w): killed", ctx.Err())
	}
}

func (p *Process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

var _ io.Closer = (*Client)(nil)
