package e2e

// The multi-node lab (test/netlab: a bridge and a network namespace per
// machine) with the podvisor server and agents the tests run in it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/cluster/ranges"
	"github.com/podvisor/podvisor/internal/runtime/containerd"
	"github.com/podvisor/podvisor/test/images"
	"github.com/podvisor/podvisor/test/netlab"
)

// netLab is test/netlab's lab and the agents started in it.
type netLab struct {
	*netlab.Lab
	t      *testing.T
	agents []*labAgent
}

// newNetLab makes the bridge and n machines; t.Cleanup removes them all and
// fails the test if any is left. A Service IP a machine's proxy has no rule
// for fails in that machine rather than leaving by the default route
// (network safety).
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	lab, err := netlab.New(n, netip.MustParsePrefix(ranges.ServiceCIDR))
	if err != nil {
		t.Fatal(err)
	}
	l := &netLab{Lab: lab, t: t}
	t.Cleanup(l.remove)
	return l
}

// remove deletes the lab and checks that the agents' pod sandboxes'
// network namespaces, bind mounts in /run/netns, are gone.
func (l *netLab) remove() {
	if err := l.Lab.Remove(); err != nil {
		l.t.Error(err)
	}
	for _, a := range l.agents {
		for name := range a.podNetns {
			if _, err := os.Stat("/run/netns/" + name); err == nil {
				l.t.Errorf("agent %s's pod network namespace %s left in /run/netns", a.Node, name)
			}
		}
	}
}

// labDaemon is a podvisor server or agent running until the test stops it.
type labDaemon struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	stderr  *syncBuffer
	exited  chan struct{}
	exitErr error
}

// startLabDaemon starts cmd and waits for its first stdout line to be ready;
// when it is not, it kills the process and says why, with its stderr.
// Later stdout lines go to the test log. Unlike join_test.go's startDaemon,
// it is safe to call from any goroutine (agents start at once) and leaves
// stopping to the caller (an agent's pods are removed before it stops).
func startLabDaemon(t *testing.T, name string, cmd *exec.Cmd, ready string, timeout time.Duration) (*labDaemon, error) {
	d := &labDaemon{t: t, name: name, cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	turn := startTurn(t)
	defer turn()
	cmd.Stderr = d.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := scanLines(out)
	go func() { d.exitErr = cmd.Wait(); close(d.exited) }()
	fail := func(format string, args ...any) (*labDaemon, error) {
		_ = cmd.Process.Kill()
		<-d.exited
		return nil, fmt.Errorf(format, args...)
	}
	select {
	case line, ok := <-lines:
		if !ok {
			<-d.exited
			return nil, fmt.Errorf("%s exited before ready: %v\nstderr:\n%s", name, d.exitErr, d.stderr)
		}
		if line != ready {
			return fail("%s: first stdout line = %q, want %q\nstderr:\n%s", name, line, ready, d.stderr)
		}
	case <-time.After(timeout):
		return fail("%s not ready after %v; stderr:\n%s", name, timeout, d.stderr)
	}
	t.Logf("%s ready in %v", name, time.Since(started).Round(time.Millisecond))
	go func() {
		for line := range lines {
			t.Logf("%s: unexpected stdout line: %q", name, line)
		}
	}()
	return d, nil
}

// Stop sends SIGTERM and waits for the exit (SIGKILL after 60 s: an error).
func (d *labDaemon) Stop() {
	if d == nil || d.cmd.Process == nil {
		return
	}
	if terminate(d.cmd, d.exited) {
		d.t.Errorf("%s did not stop within 60s of SIGTERM", d.name)
	}
}

func (d *labDaemon) Running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// startServer starts `podvisor server` in the root namespace, serving on the
// bridge address; its clean-up stops it.
func (l *netLab) startServer(t *testing.T, dataDir, clusterCIDR string, extra ...string) *labDaemon {
	t.Helper()
	args := append([]string{"server", "--data-dir", dataDir, "--api-port", fmt.Sprint(freePort(t)),
		"--bind-address", "0.0.0.0", "--advertise-address", l.Gateway.String(),
		"--etcd-client-port", fmt.Sprint(freePort(t)), "--etcd-peer-port", fmt.Sprint(freePort(t)),
		"--cluster-cidr", clusterCIDR, "--metrics-server-port", fmt.Sprint(freePort(t))}, extra...)
	var d *labDaemon
	t.Cleanup(func() {
		d.Stop()
		killLeftovers(dataDir)
	})
	d, err := startLabDaemon(t, "podvisor server", exec.Command(binary, args...),
		"podvisor server is ready: export KUBECONFIG="+filepath.Join(dataDir, "admin.kubeconfig"), 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// labAgent is a `podvisor agent` in one machine's namespace.
type labAgent struct {
	*labDaemon
	Node    string
	DataDir string
	machine int        // index in the lab's hosts
	addr    netip.Addr // its machine's
	args    []string   // of `podvisor agent`, for a restart
	// podNetns: the /run/netns names of its pod sandboxes, seen before it
	// stopped, which clean-up must have removed.
	podNetns map[string]bool
}

// Stop records the agent's pod network namespaces, then stops it.
func (a *labAgent) Stop() {
	if a.labDaemon == nil || !a.Running() {
		return
	}
	names := sandboxNetns(a.labDaemon.t, a.DataDir)
	for _, name := range names {
		a.podNetns[name] = true
	}
	a.labDaemon.t.Logf("stopping agent %s with %d pod sandbox(es)", a.Node, len(names))
	a.labDaemon.Stop()
}

var netnsName = regexp.MustCompile(`/run/netns/(cni-[0-9a-f-]+)`)

// sandboxNetns lists the /run/netns names of the pod sandboxes the
// containerd of dataDir has, from their verbose CRI status.
func sandboxNetns(t *testing.T, dataDir string) []string {
	paths, err := containerd.PathsFor(dataDir)
	if err != nil {
		t.Error(err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := criclient.NewRemoteRuntimeService(ctx, paths.Endpoint(), 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Errorf("CRI of %s: %v", dataDir, err)
		return nil
	}
	defer rs.Close(context.Background())
	pods, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		t.Errorf("CRI of %s: %v", dataDir, err)
		return nil
	}
	var names []string
	for _, pod := range pods {
		st, err := rs.PodSandboxStatus(ctx, pod.Id, true)
		if status.Code(err) == codes.NotFound {
			continue // removed since the list (a pod that just left the API)
		}
		if err != nil {
			t.Errorf("CRI of %s: sandbox %s: %v", dataDir, pod.Id, err)
			continue
		}
		found := false
		for _, info := range st.Info {
			if m := netnsName.FindStringSubmatch(info); m != nil && !found {
				names, found = append(names, m[1]), true
			}
		}
		if !found && pod.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			t.Errorf("CRI of %s: sandbox %s's verbose status names no /run/netns/cni-…: clean-up cannot check it", dataDir, pod.Id)
		}
	}
	return names
}

// agentCommand is `podvisor agent ARGS` in machine i's namespace.
func (l *netLab) agentCommand(i int, args ...string) *exec.Cmd {
	// Each machine is a network namespace of its own: its agent's service
	// proxy programs that namespace's rules only.
	return l.podvisorCommand(i, append([]string{"agent"}, args...)...)
}

func (l *netLab) podvisorCommand(i int, args ...string) *exec.Cmd {
	cmd := l.Command(i, binary, args...)
	cmd.Env = append(os.Environ(), noSystemBus)
	return cmd
}

// startAgents starts `podvisor agent --node-name NODE --data-dir DIR ARGS`
// in machines 0..len(nodes)-1, all at once, each with the busybox test image
// in its images/ folder (imported at every start), and waits for their
// ready lines. Their clean-up removes their pods, containerd state and
// processes, whether they still run or not.
func (l *netLab) startAgents(t *testing.T, nodes []string, args ...string) []*labAgent {
	t.Helper()
	tar := images.Build(t, "busybox")
	agents := make([]*labAgent, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		a := &labAgent{Node: node, DataDir: t.TempDir(), machine: i, addr: l.Hosts[i].Addr, podNetns: map[string]bool{}}
		a.args = append([]string{"--node-name", node, "--data-dir", a.DataDir}, args...)
		agents[i] = a
		l.agents = append(l.agents, a)
		t.Cleanup(func() { l.removeAgent(a) })
		if err := os.MkdirAll(filepath.Join(a.DataDir, "images"), 0o755); err != nil {
			t.Fatal(err)
		}
		// A copy, not a symlink: ImportDir imports regular files only.
		if err := copyFile(tar, filepath.Join(a.DataDir, "images", "busybox.tar")); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[i] = l.runAgent(t, a) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return agents
}

// runAgent starts a's `podvisor agent` and waits for its ready line.
func (l *netLab) runAgent(t *testing.T, a *labAgent) (err error) {
	a.labDaemon, err = startLabDaemon(t, "agent "+a.Node, l.agentCommand(a.machine, a.args...), "podvisor agent is ready: node "+a.Node, 3*time.Minute)
	return err
}

// Kill ends the agent with SIGKILL, as a machine that is gone (its pods'
// containers live on, as their shims are not its children), after
// recording its pod network namespaces for the lab's clean-up check.
func (a *labAgent) Kill() {
	t := a.labDaemon.t
	t.Helper()
	for _, name := range sandboxNetns(t, a.DataDir) {
		a.podNetns[name] = true
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.exited
}

// Restart starts a stopped or killed agent again, with the same arguments.
func (l *netLab) Restart(t *testing.T, a *labAgent) {
	t.Helper()
	if err := l.runAgent(t, a); err != nil {
		t.Fatal(err)
	}
}

// removeAgent stops the agent and removes what it leaves with `podvisor
// reset` in its machine: the pods go through the CRI, network teardown
// included, whether or not the agent still ran (purging through a running
// agent's containerd races with the agent recreating them).
func (l *netLab) removeAgent(a *labAgent) {
	if l.t.Failed() {
		for _, f := range []string{filepath.Join(a.DataDir, "podvisor.log"), filepath.Join(a.DataDir, "containerd", "containerd.log")} {
			if b, err := os.ReadFile(f); err == nil {
				l.t.Logf("agent %s: the end of %s:\n%s", a.Node, f, tail(string(b), 6000))
			}
		}
	}
	a.Stop()
	if out, err := l.podvisorCommand(a.machine, "reset", "--data-dir", a.DataDir).CombinedOutput(); err != nil {
		l.t.Errorf("agent %s clean-up: podvisor reset: %v\n%s", a.Node, err, out)
	}
	killLeftovers(a.DataDir)
	removeContainerdState(a.DataDir)
	if pid := processWhoseCmdline(a.DataDir); pid != 0 {
		l.t.Errorf("agent %s clean-up left process %d", a.Node, pid)
	}
}

// processWhoseCmdline is a live process other than this one whose command
// line contains sub, or 0.
func processWhoseCmdline(sub string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || pid == os.Getpid() {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), sub) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && len(st) > i+2 && st[i+2] == 'Z' {
				continue
			}
		}
		return pid
	}
	return 0
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
