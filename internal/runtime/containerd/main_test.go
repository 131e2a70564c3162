package containerd

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/host/proctree"
	"github.com/podvisor/podvisor/internal/runtime/containerd/daemon"
)

// The test binary is also the containerd: Start runs it as
// `TESTBINARY containerd --config FILE`, as it runs podvisor-containerd.
//
// As `TESTBINARY podvisor DATA_DIR SHIM PAUSE` it plays podvisor: it starts
// a containerd, prints "ready PID" and waits to be killed.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "containerd" {
		os.Exit(daemon.Main(os.Args[2:]))
	}
	if len(os.Args) == 4 && os.Args[1] == "podvisor" {
		o := Options{DataDir: os.Args[2], Daemon: selfAsDaemon(), Shim: os.Args[3], PodCIDR: testPodCIDR}
		p, err := Start(context.Background(), o)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("ready", p.Pid())
		select {}
	}
	os.Exit(m.Run())
}

// selfAsDaemon is the command that runs this test binary as containerd.
func selfAsDaemon() []string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return []string{exe, "containerd"}
}

var testPodCIDR = netip.MustParsePrefix("10.213.77.0/24")

// needRoot skips a test that needs a real containerd where it cannot run.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: containerd mounts and runs runc")
	}
	if _, err := findRunc(); err != nil {
		t.Skip(err)
	}
}

var (
	binsOnce sync.Once
	binsDir  string
	binsErr  error
)

// shimBinary builds the runc shim once per test binary, as podvisor's
// README builds it next to podvisor.
func shimBinary(t *testing.T) string {
	t.Helper()
	binsOnce.Do(func() {
		binsDir, binsErr = os.MkdirTemp("", "podvisor-containerd-bins-")
		if binsErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binsDir+"/",
			"github.com/podvisor/podvisor/cmd/"+ShimBinary)
		if out, err := cmd.CombinedOutput(); err != nil {
			binsErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binsErr != nil {
		t.Fatal(binsErr)
	}
	return filepath.Join(binsDir, ShimBinary)
}

// testOptions are the options of a test's containerd in dataDir.
func testOptions(t *testing.T, dataDir string) Options {
	return Options{
		DataDir: dataDir,
		Daemon:  selfAsDaemon(),
		Shim:    shimBinary(t),
		PodCIDR: testPodCIDR,
		Timeout: 2 * time.Minute, // a loaded 2-core machine
	}
}

// testNode is a test's containerd: its process can be stopped and started
// again, as podvisor does across its restarts.
type testNode struct {
	t *testing.T
	o Options
	p *Process
}

// startTest starts a containerd for the test and removes, at its end, every
// pod it left, the containerd, its state directory and its bridge.
func startTest(t *testing.T, set ...func(*Options)) *testNode {
	t.Helper()
	n := &testNode{t: t, o: testOptions(t, t.TempDir())}
	for _, f := range set {
		f(&n.o)
	}
	t.Cleanup(n.cleanUp)
	n.start()
	return n
}

func (n *testNode) start() {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := Start(ctx, n.o)
	if err != nil {
		n.t.Fatal(err)
	}
	n.p = p
}

func (n *testNode) stop() {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.p.Stop(ctx); err != nil {
		n.t.Error(err)
	}
}

func (n *testNode) cleanUp() {
	paths, _ := PathsFor(n.o.DataDir)
	if n.p == nil {
		if _, err := os.Stat(paths.State); err != nil {
			return // never started
		}
		// Started by another process: give its containerd time to die.
		for deadline := time.Now().Add(10 * time.Second); Serving(paths.Socket) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		n.start() // the pods it left must go
	}
	select {
	case <-n.p.Done():
		n.start()
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs := criRuntime(n.t, n.p)
	pods, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		n.t.Error(err)
	}
	for _, pod := range pods {
		if err := rs.StopPodSandbox(ctx, pod.Id); err != nil {
			n.t.Error(err)
		}
		if err := rs.RemovePodSandbox(ctx, pod.Id); err != nil {
			n.t.Error(err)
		}
	}
	n.stop()
	// A shim its containerd no longer knows (a start the test cancelled
	// leaves one without a task) outlives it; the next start of a
	// containerd of this data dir would kill it, no later test will.
	for _, s := range ShimsOf(proctree.Read(), n.p.Paths().Socket) {
		n.t.Logf("killing shim %d (-id %s) left after the test's containerd stopped", s.PID, s.ID)
		_ = syscall.Kill(s.PID, syscall.SIGKILL)
	}
	os.RemoveAll(n.p.Paths().State)
	RemovePodNetwork(n.p.Paths(), "")
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/podvisor-test")
	for _, d := range dirs {
		os.Remove(d)
	}
}
