package cri

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime/containerd"
	containerddaemon "github.com/podvisor/podvisor/internal/runtime/containerd/daemon"
	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
	"github.com/podvisor/podvisor/test/images"
)

// The integration tests run against a private containerd: by default the
// one podvisor embeds (internal/runtime/containerd, containerd 2.x), run from this
// test binary as `TESTBINARY containerd --config FILE`, as podvisor runs
// podvisor-containerd. PODVISOR_TEST_CONTAINERD or
// PODVISOR_TEST_CONTAINERD_DIR choose a containerd binary instead
// (externalcontainerd_test.go), e.g. Debian's 1.6. One is started for the
// package run (lazily, by the first test that needs it) and removed, with
// every pod it still runs, by TestMain.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "containerd" {
		os.Exit(containerddaemon.Main(os.Args[2:]))
	}
	code := m.Run()
	if shared != nil {
		if code != 0 && shared.log != "" {
			// The directory goes; its log is what explains a failure.
			kept := filepath.Join(os.TempDir(), "podvisor-cri-test-containerd.log")
			if b, err := os.ReadFile(shared.log); err == nil && os.WriteFile(kept, b, 0o644) == nil {
				fmt.Fprintf(os.Stderr, "containerd's log: %s\n", kept)
			}
		}
		shared.remove()
	}
	os.Exit(code)
}

// testContainerd is the containerd the tests share.
type testContainerd struct {
	daemon
	endpoint string
	podCIDR  netip.Prefix
	log      string // containerd's own output
	dir      string // everything it keeps, removed at the end
	skip     string // why there can be none here: the tests skip
	err      error  // why it did not start: the tests fail
}

// daemon is one way of running containerd.
type daemon interface {
	// stop stops containerd as a service manager would; the shims, and
	// with them the containers, keep running.
	stop() error
	// start starts it (again) on the same state.
	start() error
	// close stops it for good, ready for its directory to go.
	close()
}

var (
	sharedOnce sync.Once
	shared     *testContainerd
)

const (
	testBridge   = "pvcritest0"
	testPodCIDR  = "10.213.7.0/24"
	busyboxImage = images.BusyboxLatestImage
)

// needContainerd returns the shared containerd, or skips the test with the
// reason there is none.
func needContainerd(t *testing.T) *testContainerd {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: not with -short")
	}
	sharedOnce.Do(func() { shared = startContainerd() })
	if shared.skip != "" {
		t.Skipf("no containerd for the integration tests: %s", shared.skip)
	}
	if shared.err != nil {
		t.Fatalf("containerd for the integration tests: %v", shared.err)
	}
	return shared
}

// restart stops containerd, calls away while it is down, and starts it
// again on the same state, as podvisor does across its own restarts.
func (c *testContainerd) restart(t *testing.T, away func()) {
	t.Helper()
	if err := c.stop(); err != nil {
		t.Error(err)
	}
	away()
	if err := c.start(); err != nil {
		t.Fatal(err)
	}
}

func startContainerd() *testContainerd {
	c := &testContainerd{podCIDR: netip.MustParsePrefix(testPodCIDR)}
	if os.Geteuid() != 0 {
		c.skip = "not root: containerd mounts and runs runc"
		return c
	}
	if err := missingPieces(); err != nil {
		c.skip = err.Error()
		return c
	}
	dir, err := os.MkdirTemp("", "pvcri")
	if err != nil {
		c.err = err
		return c
	}
	c.dir = dir
	if external() {
		c.daemon, c.err = startExternal(c)
	} else {
		c.daemon, c.err = startEmbedded(c)
	}
	return c
}

// embedded is podvisor's own containerd.
type embedded struct {
	o containerd.Options
	p *containerd.Process
}

func startEmbedded(c *testContainerd) (daemon, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	e := &embedded{o: containerd.Options{
		DataDir: filepath.Join(c.dir, "data"),
		Daemon:  []string{exe, "containerd"},
		PodCIDR: c.podCIDR,
		Bridge:  testBridge,
		Timeout: 2 * time.Minute, // a loaded 2-core machine
	}}
	if e.o.Shim, err = buildShim(c.dir); err != nil {
		return nil, err
	}
	paths, err := containerd.PathsFor(e.o.DataDir)
	if err != nil {
		return nil, err
	}
	// The air-gap folder: Start imports busybox (and would import the
	// pause image; it builds that one itself).
	if err := os.MkdirAll(paths.Images, 0o755); err != nil {
		return nil, err
	}
	if _, err := images.WriteTar(paths.Images, "busybox", imagebuild.Docker); err != nil {
		return nil, err
	}
	c.log = paths.Log
	if err := e.start(); err != nil {
		return e, err
	}
	c.endpoint = e.p.Endpoint()
	return e, nil
}

// missingPieces says which of runc and the CNI plugins, which containerd
// needs from the distribution, is not installed.
func missingPieces() error {
	runc := false
	for _, p := range []string{"/usr/sbin/runc", "/usr/bin/runc"} {
		if _, err := os.Stat(p); err == nil {
			runc = true
		}
	}
	if _, err := exec.LookPath("runc"); err == nil {
		runc = true
	}
	if !runc {
		return fmt.Errorf("runc not installed (Debian: apt-get install runc)")
	}
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if _, err := os.Stat(filepath.Join(d, "bridge")); err == nil {
			return nil
		}
	}
	return fmt.Errorf("no CNI plugins in /usr/lib/cni or /opt/cni/bin (Debian: apt-get install containernetworking-plugins)")
}

// buildShim builds the runc shim into dir, as podvisor's README builds it
// next to podvisor.
func buildShim(dir string) (string, error) {
	cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/podvisor/podvisor/cmd/"+containerd.ShimBinary)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build the shim: %v\n%s", err, out)
	}
	return filepath.Join(dir, containerd.ShimBinary), nil
}

func (e *embedded) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := containerd.Start(ctx, e.o)
	if err != nil {
		return err
	}
	e.p = p
	return nil
}

func (e *embedded) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.p.Stop(ctx)
}

func (e *embedded) close() {
	if e.p == nil {
		return
	}
	select {
	case <-e.p.Done():
	default:
		e.stop()
	}
	state := e.p.Paths().State
	unmountUnder(state)
	os.RemoveAll(state)
}

// remove removes every sandbox (so no container outlives the test run),
// stops containerd, and removes what it left.
func (c *testContainerd) remove() {
	if c.daemon == nil {
		c.cleanDir()
		return
	}
	if c.err == nil && c.skip == "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if r, err := New(ctx, Config{Endpoint: c.endpoint, StateDir: filepath.Join(c.dir, "agent")}); err == nil {
			list, _ := r.rs.ListPodSandbox(quiet(ctx), nil)
			for _, s := range list {
				r.rs.StopPodSandbox(quiet(ctx), s.Id)
				r.rs.RemovePodSandbox(quiet(ctx), s.Id)
			}
			r.Close()
		}
		cancel()
	}
	c.close()
	// The bridge and, for the embedded containerd, its masquerade rule.
	if paths, err := containerd.PathsFor(filepath.Join(c.dir, "data")); err == nil && c.dir != "" {
		containerd.RemovePodNetwork(paths, testBridge)
	}
	exec.Command("ip", "link", "del", testBridge).Run()
	c.cleanDir()
}

// cleanDir unmounts what containerd left mounted under its directory, then
// removes it.
func (c *testContainerd) cleanDir() {
	if c.dir == "" {
		return
	}
	unmountUnder(c.dir)
	os.RemoveAll(c.dir)
}

// unmountUnder unmounts, deepest first, whatever is mounted below dir.
func unmountUnder(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	slices.Sort(mounts)
	for _, m := range slices.Backward(mounts) {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
