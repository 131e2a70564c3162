// Package e2e drives a real `podvisor up` through the Kubernetes API.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// machineTurns orders the tests that load the whole machine (heavy) against
// the starts of the podvisors the other tests run: a heavy test holds it
// exclusively for its whole run, a start shares it until its podvisor is
// ready. A control plane started at nice 10 beside a 200-pod burst did not
// become ready within podvisor's 2 minutes (CI on adec84a); a start waits
// for the heavy test instead, and a heavy test for the starts under way.
var (
	machineTurns sync.RWMutex
	heavyMu      sync.Mutex
	heavyHolder  string // top-level name of the test holding machineTurns exclusively
)

// heavy makes a test that loads the whole machine by itself (100 pods
// started at once, a podvisor killed under churn) wait until no other heavy
// test runs and no other test's podvisor is starting, and hold its turn
// until it ends. Two at once, beside the other tests, pushed a 2-core
// machine to a load of 35, where their own waits and the light tests'
// timing (a readiness period, a preStop) failed; light tests that are
// already running still run beside one heavy test.
func heavy(t *testing.T) {
	t.Helper()
	start := time.Now()
	machineTurns.Lock()
	heavyMu.Lock()
	heavyHolder = topTestName(t)
	heavyMu.Unlock()
	t.Cleanup(func() {
		heavyMu.Lock()
		heavyHolder = ""
		heavyMu.Unlock()
		machineTurns.Unlock()
	})
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %v for another heavy test or podvisor starts to end", d.Round(time.Second))
	}
}

// startTurn is taken while a podvisor (or a lab's server or agent) starts,
// so that it does not start beside a heavy test; the returned func ends the
// turn. The heavy test's own podvisors start within its exclusive turn.
func startTurn(t *testing.T) (done func()) {
	heavyMu.Lock()
	own := heavyHolder != "" && heavyHolder == topTestName(t)
	heavyMu.Unlock()
	if own {
		return func() {}
	}
	start := time.Now()
	machineTurns.RLock()
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %v for a heavy test to end before starting podvisor", d.Round(time.Second))
	}
	var once sync.Once
	return func() { once.Do(machineTurns.RUnlock) }
}

func topTestName(t *testing.T) string { return strings.Split(t.Name(), "/")[0] }

// binary is the podvisor built once for the whole package.
var binary string

func TestMain(m *testing.M) {
	// Most e2e tests wait on timers in podvisor rather than use CPU: run more of
	// them at once than go test's default (GOMAXPROCS, 2 here), unless told.
	flag.Parse()
	if missing := containerdMissing(); e2eRuntime() == "containerd" && missing != "" {
		fmt.Fprintf(os.Stderr, "the e2e suite runs on the containerd runtime, podvisor's default, and %s; "+
			"or run it on the process runtime with PODVISOR_E2E_RUNTIME=process\n", strings.TrimPrefix(missing, "the containerd runtime "))
		os.Exit(1)
	}
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "6")
	}
	dir, err := os.MkdirTemp("", "podvisor-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "podvisor")
	// The binaries the README builds (./cmd/...): podvisor agent runs
	// podvisor-agent (no control plane), podvisor runs podvisor-containerd
	// and podvisor-shim (process runtime), and containerd runs
	// containerd-shim-runc-v2, all from beside podvisor.
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
	build.Dir = moduleRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building podvisor:", err)
		os.Exit(1)
	}
	// A machine's /etc/podvisor/config.yaml must not change what the tests
	// run: every podvisor they start reads this empty file instead.
	empty := filepath.Join(dir, "empty-config.yaml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("PODVISOR_CONFIG_FILE", empty)
	code := m.Run()
	stopShared(code != 0)
	os.RemoveAll(dir)
	os.Exit(code)
}

func moduleRoot() string {
	wd, _ := os.Getwd()
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return wd
}

// Podvisor is one running `podvisor up`.
type Podvisor struct {
	t        *testing.T
	shared   bool // the suite's shared podvisor (Shared)
	DataDir  string
	APIPort  int
	Agent    int
	NodeName string
	Args     []string
	Env      []string // added to the test's environment
	// Runtime is podvisor's --runtime: e2eRuntime() unless the test says
	// otherwise.
	Runtime string
	// ServiceProxy runs the node's kube-proxy. Off unless a test asks
	// (serviceProxyTest): podvisors of one network namespace would rewrite
	// each other's Service rules.
	ServiceProxy bool
	// ConfigFileOnly starts podvisor up with --config-file alone, every
	// other flag written into that file.
	ConfigFileOnly bool
	// ClusterDNS serves the node's cluster DNS, on a port of its own
	// (DNSPort). Off unless a test asks: DNS of parallel podvisors must not
	// collide, and tests that do not resolve names need none.
	ClusterDNS bool
	DNSPort    int
	// MetricsServer runs the embedded metrics-server on a port of its own.
	// Off unless a test asks: it scrapes the node every 15 s.
	MetricsServer     bool
	MetricsServerPort int
	// clusterCIDR is this podvisor's own pod network (containerd runtime),
	// so that parallel podvisors never share a subnet.
	clusterCIDR string
	imported    bool // the busybox test image is in its containerd
	// testserverImport imports the testserver image on first use.
	testserverImport sync.Once
	// etcdPorts are chosen once and kept across restarts of this podvisor.
	etcdPorts [2]int
	cmd       *exec.Cmd
	stderr    *syncBuffer
	exited    chan struct{}
	exitErr   error
	Admin     *kubernetes.Clientset
	AdminCfg  *rest.Config
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := pickPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

var (
	portsMu sync.Mutex
	// portsTaken: ports handed out in this process, never handed out twice.
	portsTaken = map[int]bool{}
)

// pickPort returns a port that nothing listens on, below Linux's ephemeral
// range (32768-60999): a port the kernel hands out may be taken by one of
// the many outgoing connections before podvisor binds it, which made tests
// fail with "address already in use".
func pickPort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if portsTaken[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		portsTaken[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free port below the ephemeral range")
}

// NewPodvisor prepares a podvisor on free ports and a fresh data dir.
func NewPodvisor(t *testing.T, extra ...string) *Podvisor {
	t.Helper()
	return &Podvisor{t: t, DataDir: t.TempDir(), APIPort: freePort(t), Agent: freePort(t),
		NodeName: "node-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), Args: extra,
		Runtime: e2eRuntime()}
}

// UpArgs is the command line Start runs (its ports chosen once).
func (p *Podvisor) UpArgs() []string {
	p.t.Helper()
	if p.etcdPorts[0] == 0 {
		// Parallel podvisors would race for etcd's usual 2379/2380: give each its own.
		p.etcdPorts = [2]int{freePort(p.t), freePort(p.t)}
	}
	args := append([]string{"up", "--data-dir", p.DataDir, "--api-port", fmt.Sprint(p.APIPort),
		"--agent-port", fmt.Sprint(p.Agent), "--node-name", p.NodeName,
		"--etcd-client-port", fmt.Sprint(p.etcdPorts[0]), "--etcd-peer-port", fmt.Sprint(p.etcdPorts[1]),
		"--runtime", p.Runtime}, p.Args...)
	if !p.ServiceProxy {
		args = append(args, "--disable-service-proxy=true")
	}
	if p.ClusterDNS {
		if p.DNSPort == 0 {
			p.DNSPort = freePort(p.t)
		}
		args = append(args, "--cluster-dns-port", fmt.Sprint(p.DNSPort))
	} else {
		args = append(args, "--disable-cluster-dns=true")
	}
	if p.MetricsServer {
		if p.MetricsServerPort == 0 {
			p.MetricsServerPort = freePort(p.t)
		}
		args = append(args, "--metrics-server-port", fmt.Sprint(p.MetricsServerPort))
	} else {
		args = append(args, "--disable-metrics-server=true")
	}
	if !slices.ContainsFunc(args, func(a string) bool { return a == "--config" || strings.HasPrefix(a, "--config=") }) {
		args = append(args, "--config", harnessKubeletConfig(p.t))
	}
	if p.Runtime == "containerd" {
		if p.clusterCIDR == "" {
			p.clusterCIDR = nextClusterCIDR()
		}
		args = append(args, "--cluster-cidr", p.clusterCIDR)
	}
	return args
}

// harnessEviction is the node-pressure eviction of every podvisor a test
// starts without a KubeletConfiguration of its own: the machines the suite
// runs on share their disk with builds, and upstream's default
// imagefs.available 15% once evicted test pods (and tainted the node
// disk-pressure) when a build filled the disk to 84%. As kind's and the
// conformance runner's nodes do, disk eviction waits until 1 GiB is left;
// the tests of eviction itself give their own thresholds.
const harnessEviction = `evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  imagefs.available: 1Gi
  nodefs.inodesFree: 5%
  imagefs.inodesFree: 5%
`

func harnessKubeletConfig(t *testing.T) string { t.Helper(); return kubeletConfig(t, harnessEviction) }

// writeConfigFile writes command-line flags (--name value pairs, or
// --name=value) as a podvisor config file and returns its path.
func writeConfigFile(t *testing.T, flags []string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(flags); i++ {
		name, value, ok := strings.Cut(strings.TrimLeft(flags[i], "-"), "=")
		if !ok && i+1 < len(flags) {
			i++
			value = flags[i]
		}
		fmt.Fprintf(&b, "%s: %s\n", name, strconv.Quote(value))
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// timingSensitive are the tests that check when things happen (back-off
// delays, grace periods, signal order, probe periods): their podvisors, and
// the shared one, run at normal priority, every other test's at nice 10.
var timingSensitive = map[string]bool{
	"TestCrashLoopBackOffSchedule": true, "TestProbes": true, "TestGracefulTermination": true,
	"TestGracefulShutdownLogind": true, "TestGracefulShutdownByPodPriorityCommand": true,
	"TestRecreatedPodsStartPromptly": true, "TestLifecycleHooks": true, "TestSleepHooks": true,
	"TestAgentRestartDuringTermination": true, "TestContainersStartOnceTheirSecretIsCreated": true,
}

// Start runs podvisor up and waits for the ready line.
func (p *Podvisor) Start() {
	p.t.Helper()
	args := p.UpArgs()
	if p.ConfigFileOnly {
		args = []string{"up", "--config-file", writeConfigFile(p.t, args[1:])}
	}
	turn := startTurn(p.t)
	defer turn()
	p.cmd = exec.Command(binary, args...)
	if !p.shared && !timingSensitive[strings.Split(p.t.Name(), "/")[0]] {
		// The rest of the suite yields the CPU to podvisors whose tests
		// check when things happen: on two cores, a dozen podvisors
		// starting at once delayed restarts and signals by tens of seconds.
		// Children (containerd, shims, containers) inherit the niceness.
		p.cmd = exec.Command("nice", append([]string{"-n", "10", binary}, args...)...)
	}
	if len(p.Env) > 0 {
		p.cmd.Env = append(os.Environ(), p.Env...)
	}
	p.stderr = &syncBuffer{}
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	started := time.Now()
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	lines := scanLines(out)
	go func() {
		p.exitErr = p.cmd.Wait()
		reportOwnExit(p.NodeName, p.cmd, p.stderr)
		close(p.exited)
	}()
	if p.NodeName != "shared-node" {
		p.t.Cleanup(func() {
			if p.Runtime == "containerd" {
				purgeContainerd(p.t.Logf, p.DataDir)
			}
			p.Stop()
			killLeftovers(p.DataDir)
			if p.Runtime == "containerd" {
				removeContainerdState(p.DataDir)
			}
		})
	}
	want := "podvisor is ready: export KUBECONFIG=" + filepath.Join(p.DataDir, "admin.kubeconfig")
	select {
	case line, ok := <-lines:
		if !ok {
			<-p.exited
			p.t.Fatalf("podvisor exited before ready: %v\nstderr:\n%s", p.exitErr, p.stderr)
		}
		if line != want {
			p.t.Fatalf("first stdout line = %q, want %q", line, want)
		}
	case <-time.After(3 * time.Minute):
		p.t.Fatalf("podvisor not ready after 3m; stderr:\n%s", p.stderr)
	}
	p.t.Logf("podvisor ready in %v", time.Since(started).Round(time.Millisecond))
	turn()
	go func() {
		for line := range lines {
			p.t.Logf("unexpected stdout line: %q", line)
		}
	}()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(p.DataDir, "admin.kubeconfig"))
	if err != nil {
		p.t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	p.AdminCfg = cfg
	p.Admin = kubernetes.NewForConfigOrDie(cfg)
	if p.Runtime == "containerd" && !p.imported {
		// What adapt gives pods written for the process runtime.
		importImages(p.t, p.DataDir, "busybox")
		p.imported = true
	}
}

// Stop sends SIGTERM and waits for a clean exit.
func (p *Podvisor) Stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	if terminate(p.cmd, p.exited) {
		// Not t.Errorf: the shared podvisor stops after its tests ended. The
		// exit code then shows the kill and fails whoever checks it.
		fmt.Fprintf(os.Stderr, "podvisor %s did not stop within 60s of SIGTERM\n", p.NodeName)
	}
}

// terminate sends SIGTERM to a running podvisor process and waits for it to
// exit (exited is closed then); after 60 s it kills it and reports true.
func terminate(cmd *exec.Cmd, exited <-chan struct{}) (killed bool) {
	select {
	case <-exited:
		return false
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return false
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return true
	}
}

// reportOwnExit prints, on the test binary's stderr, how a podvisor that
// exited on its own with a failure ended: a test that loses its podvisor
// otherwise shows only refused connections (CI once did). A podvisor
// stopped by SIGTERM exits 0 and one killed by a signal is a test's doing;
// neither is reported. Not t.Logf: the exit may come after the test ended.
func reportOwnExit(node string, cmd *exec.Cmd, stderr *syncBuffer) {
	st := cmd.ProcessState
	if st == nil || st.ExitCode() <= 0 {
		return
	}
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	lines = lines[max(0, len(lines)-80):]
	fmt.Fprintf(os.Stderr, "podvisor %s exited on its own: %v; the last %d lines of its stderr:\n%s\n",
		node, st, len(lines), strings.Join(lines, "\n"))
}

// ExitCode is the exit status after Stop.
func (p *Podvisor) ExitCode() int {
	<-p.exited
	return p.cmd.ProcessState.ExitCode()
}

func (p *Podvisor) Stderr() string { return p.stderr.String() }

// Eventually polls cond until it returns true or the deadline passes.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s (last error: %v)", timeout, what, lastErr)
}

// WaitServiceAccount waits until the controller manager made the default
// service account of ns, as a user of a real cluster would.
func (p *Podvisor) WaitServiceAccount(ns string) {
	p.t.Helper()
	Eventually(p.t, 60*time.Second, "service account default/"+ns, func() (bool, error) {
		_, err := p.Admin.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// Namespace creates a fresh namespace for a test and waits for its service account.
func (p *Podvisor) Namespace(name string) string {
	p.t.Helper()
	_, err := p.Admin.CoreV1().Namespaces().Create(context.Background(),
		&v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		p.t.Fatal(err)
	}
	p.WaitServiceAccount(name)
	return name
}

// runPodvisor runs the binary to completion (for commands that must fail fast).
func runPodvisor(t *testing.T, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("podvisor %v did not finish within %v", args, timeout)
	}
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// scanLines sends r's lines on the channel it returns, closed at EOF.
func scanLines(r io.Reader) <-chan string {
	lines := make(chan string, 16)
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	return lines
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

func portOf(l net.Listener) int { return l.Addr().(*net.TCPAddr).Port }
