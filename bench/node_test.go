package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/host/freeport"
)

// logsEnv names a directory to keep each node's logs in (podvisor's
// stderr, containerd's log) for a look at where the time went.
const logsEnv = "PODVISOR_BENCH_LOGS"

// binaryEnv names a prebuilt podvisor to benchmark; without it the benchmarks
// build ./cmd/podvisor from the module root, as the e2e TestMain does.
const binaryEnv = "PODVISOR_BINARY"

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
	// etcdFlags: whether the binary has --etcd-client-port/--etcd-peer-port
	// (older builds always take 2379/2380, so only one can run at a time).
	etcdFlags bool
	// runtimeFlag: whether the binary has --runtime (older builds run host
	// processes only; newer ones default to containerd).
	runtimeFlag bool
	// serviceFlags: whether the binary runs a service proxy and cluster DNS
	// (and has the flags that turn them off).
	serviceFlags bool
	// metricsPortFlag: whether the binary runs a metrics-server on a port
	// that can be chosen (its default, 10260, is one per machine).
	metricsPortFlag bool
)

// podvisorBinary returns the binary under test, building it on first use.
func podvisorBinary(b *testing.B) string {
	b.Helper()
	binaryOnce.Do(func() {
		if p := os.Getenv(binaryEnv); p != "" {
			binaryPath = p
		} else {
			// A fixed path, so repeated runs reuse (and do not leak) the build.
			dir := filepath.Join(os.TempDir(), "podvisor-bench-bin")
			if binaryErr = os.MkdirAll(dir, 0o755); binaryErr != nil {
				return
			}
			binaryPath = filepath.Join(dir, "podvisor")
			// The containerd runtime runs the shim found beside the binary.
			build := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
			build.Dir = moduleRoot()
			build.Stdout, build.Stderr = os.Stderr, os.Stderr
			if err := build.Run(); err != nil {
				binaryErr = fmt.Errorf("building podvisor: %w", err)
				return
			}
		}
		help, _ := exec.Command(binaryPath, "up", "-h").CombinedOutput()
		etcdFlags = bytes.Contains(help, []byte("etcd-client-port"))
		runtimeFlag = bytes.Contains(help, []byte("-runtime"))
		serviceFlags = bytes.Contains(help, []byte("disable-service-proxy"))
		metricsPortFlag = bytes.Contains(help, []byte("metrics-server-port"))
	})
	if binaryErr != nil {
		b.Fatal(binaryErr)
	}
	return binaryPath
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

func freePort(b *testing.B) int {
	b.Helper()
	port, err := freeport.Pick()
	if err != nil {
		b.Fatal(err)
	}
	return port
}

// node is one `podvisor up` under benchmark.
type node struct {
	b         *testing.B
	binary    string
	runtime   string // process or containerd (PODVISOR_BENCH_RUNTIME)
	dataDir   string
	ports     [4]int // API, agent, etcd client, etcd peer
	cmd       *exec.Cmd
	stderr    *lockedBuffer
	exited    chan struct{}
	exitErr   error
	readyIn   time.Duration // exec → ready line
	client    *kubernetes.Clientset
	cleanedUp bool
	// cg holds podvisor and what it starts (cgroupcpu_test.go); nil
	// where the benchmark cannot make one (not root).
	cg *cpuCgroup
	// services runs the node's service proxy and cluster DNS (serviceNode);
	// other benchmarks run neither, as the e2e harness: kube-proxies of one
	// network namespace would rewrite each other's tables.
	services bool
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newNode prepares a podvisor on free ports and a fresh data dir; the
// cleanup stops it and kills the containers it leaves behind.
func newNode(b *testing.B) *node {
	b.Helper()
	n := &node{b: b, binary: podvisorBinary(b), runtime: benchRuntime(b), dataDir: b.TempDir()}
	if !runtimeFlag && n.runtime != "process" {
		b.Skipf("%s has no --runtime flag: it runs host processes only", n.binary)
	}
	for i := range n.ports {
		n.ports[i] = freePort(b)
	}
	// Registered after TempDir, so it runs before the directory is removed.
	b.Cleanup(n.cleanup)
	return n
}

// start runs `podvisor up` and waits for its ready line.
func (n *node) start() {
	b := n.b
	b.Helper()
	args := []string{"up", "--data-dir", n.dataDir, "--api-port", fmt.Sprint(n.ports[0]),
		"--agent-port", fmt.Sprint(n.ports[1]), "--node-name", "bench-node"}
	if etcdFlags {
		args = append(args, "--etcd-client-port", fmt.Sprint(n.ports[2]), "--etcd-peer-port", fmt.Sprint(n.ports[3]))
	}
	if runtimeFlag {
		args = append(args, "--runtime", n.runtime)
	}
	if n.runtime == "containerd" {
		args = append(args, "--cluster-cidr", nextClusterCIDR())
	}
	if metricsPortFlag {
		args = append(args, "--metrics-server-port", fmt.Sprint(freePort(b)))
	}
	switch {
	case !serviceFlags:
	case n.services:
		args = append(args, "--cluster-dns-port", fmt.Sprint(freePort(b)))
	default:
		args = append(args, "--disable-service-proxy=true", "--disable-cluster-dns=true")
	}
	n.cmd = exec.Command(n.binary, args...)
	n.stderr = &lockedBuffer{}
	n.cmd.Stderr = n.stderr
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	lines := make(chan string, 16)
	started := time.Now()
	if err := n.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if cg, err := newCPUCgroup(fmt.Sprintf("podvisor-bench-%d", n.cmd.Process.Pid)); err != nil {
		b.Logf("no CPU accounting of the node's processes: %v", err)
	} else if err := cg.add(n.cmd.Process.Pid); err != nil {
		b.Logf("no CPU accounting of the node's processes: %v", err)
		_ = cg.remove()
	} else {
		n.cg = cg
	}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	exited := make(chan struct{})
	n.exited = exited
	go func() { n.exitErr = n.cmd.Wait(); close(exited) }()
	want := "podvisor is ready: export KUBECONFIG=" + filepath.Join(n.dataDir, "admin.kubeconfig")
	select {
	case line, ok := <-lines:
		n.readyIn = time.Since(started)
		if !ok {
			<-exited
			b.Fatalf("podvisor exited before ready: %v\nstderr:\n%s", n.exitErr, tail(n.stderr.String(), 4000))
		}
		if line != want {
			b.Fatalf("first stdout line = %q, want %q", line, want)
		}
	case <-time.After(3 * time.Minute):
		b.Fatalf("podvisor not ready after 3m; stderr:\n%s", tail(n.stderr.String(), 4000))
	}
	go func() {
		for range lines {
		}
	}()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(n.dataDir, "admin.kubeconfig"))
	if err != nil {
		b.Fatal(err)
	}
	// No client-side throttling: 100 concurrent calls must leave at once.
	cfg.QPS, cfg.Burst = 1000, 1000
	n.client = kubernetes.NewForConfigOrDie(cfg)
	if n.runtime == "containerd" {
		n.importImages()
	}
}

func (n *node) pid() int { return n.cmd.Process.Pid }

// stop sends SIGTERM and waits for the exit (a minute at most, then SIGKILL).
func (n *node) stop() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.exited:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(60 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
		n.b.Logf("podvisor did not stop within 60s of SIGTERM; killed")
	}
}

// cleanup deletes the pods left in the API, stops podvisor and kills the
// container processes that outlive it by design.
func (n *node) cleanup() {
	if n.cleanedUp {
		return
	}
	n.cleanedUp = true
	if n.client != nil && n.running() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = n.client.CoreV1().Pods(metav1.NamespaceAll).DeleteCollection(ctx,
			metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		nss, err := n.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, ns := range nss.Items {
				_ = n.client.CoreV1().Pods(ns.Name).DeleteCollection(ctx,
					metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
			}
		}
		cancel()
	}
	if n.runtime == "containerd" && n.running() {
		n.purgeContainerd()
	}
	n.stop()
	n.keepLogs()
	killLeftovers(n.dataDir)
	if n.runtime == "containerd" {
		n.removeContainerdState()
	}
	if n.cg != nil {
		if err := n.cg.remove(); err != nil {
			n.b.Logf("node cgroup: %v", err)
		}
	}
}

func (n *node) running() bool {
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// killLeftovers SIGKILLs, by pid, the processes of one data dir: containers,
// whose environment names it (the termination message path), and shims,
// whose command line does.
func killLeftovers(dataDir string) {
	for range 3 { // a shim may start a container while we scan
		killed := 0
		for _, pid := range pids() {
			if pid == os.Getpid() {
				continue
			}
			env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if bytes.Contains(env, []byte(dataDir)) || bytes.Contains(cmdline, []byte(dataDir)) {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed++
				}
			}
		}
		if killed == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// namespace creates ns and waits for its default service account, which the
// API requires before it admits pods.
func (n *node) namespace(ns string) string {
	b := n.b
	b.Helper()
	ctx := context.Background()
	_, err := n.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := n.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return ns
		}
		if time.Now().After(deadline) {
			b.Fatalf("no default service account in %s: %v", ns, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shPod is a one-container pod running script with sh -c.
func shPod(ns, name string, policy v1.RestartPolicy, script string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{
			RestartPolicy:                 policy,
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			Containers:                    []v1.Container{{Name: "c", Image: "none", Command: []string{"sh", "-c", script}}},
		},
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// report prints a table to stdout: b.Log would keep only its first 10 lines.
// The load average goes with it: other work on the machine moves every figure.
func report(b *testing.B, lines ...string) {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\n%s (runtime %s; load average %s):\n%s\n\n", b.Name(), cmp.Or(os.Getenv(runtimeEnv), "process"),
		strings.Join(strings.Fields(string(load))[:3], " "), strings.Join(lines, "\n"))
}

// keepLogs copies the node's logs into $PODVISOR_BENCH_LOGS/<benchmark>.
func (n *node) keepLogs() {
	dir := os.Getenv(logsEnv)
	if dir == "" || n.stderr == nil {
		return
	}
	dir = filepath.Join(dir, strings.ReplaceAll(n.b.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		n.b.Log(err)
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "podvisor.stderr"), []byte(n.stderr.String()), 0o644)
	for _, f := range []string{"containerd/containerd.log", "podvisor.log"} {
		if data, err := os.ReadFile(filepath.Join(n.dataDir, f)); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644)
		}
	}
}
