package e2e

// A lab of machines on one LAN, on this one machine: a Linux bridge in the
// root network namespace with the first address of a private /24, and one
// network namespace per machine, plugged into the bridge by a veth, with its
// own address and a default route through the bridge (podvisor takes the
// node's IP from the default route's interface: internal/agent/node/hostip.go).
// `podvisor server` runs in the root namespace, bound on the bridge address;
// each `podvisor agent` runs in a machine's namespace through
// `nsenter --net`, which execs podvisor: the pid the test holds is
// podvisor's, so SIGTERM reaches it. Not `ip netns exec`: it gives the
// command a mount namespace with a fresh /sys, without the cgroup mounts
// runc needs ("no cgroup mount found in mountinfo").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/controlplane"
	"github.com/podvisor/podvisor/internal/runtime/containerd"
	"github.com/podvisor/podvisor/test/images"
)

// netLab is the bridge and the machines' namespaces.
type netLab struct {
	t       *testing.T
	id      string // 4 hex digits in every name the lab makes
	bridge  string
	prefix  netip.Prefix
	gateway netip.Addr // the bridge's address: the server's
	hosts   []labHost
	agents  []*labAgent
}

// labHost is one machine: a network namespace with one address.
type labHost struct {
	NS   string
	veth string // the root namespace's end, a port of the bridge
	Addr netip.Addr
}

// newNetLab makes the bridge and n machines; t.Cleanup removes them all and
// fails the test if any is left.
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	l := &netLab{t: t, id: fmt.Sprintf("%04x", rand.IntN(1<<16))}
	l.bridge = "pvlab" + l.id
	prefix, err := unusedPrefix("10.99.%d.0/24", 0, 255)
	if err != nil {
		t.Fatal(err)
	}
	l.prefix, l.gateway = prefix, prefix.Addr().Next()
	t.Cleanup(l.remove)
	l.ip("link", "add", l.bridge, "type", "bridge")
	l.ip("addr", "add", netip.PrefixFrom(l.gateway, 24).String(), "dev", l.bridge)
	l.ip("link", "set", l.bridge, "up")
	// Bridged frames pass through iptables' FORWARD chain when br_netfilter
	// is loaded: let the bridge's own traffic through whatever the policy.
	l.run("iptables", append([]string{"-w", "-I"}, l.forwardRule()...)...)
	addr := l.gateway
	for i := range n {
		addr = addr.Next()
		h := labHost{NS: fmt.Sprintf("pvlab%s-m%d", l.id, i+1), veth: fmt.Sprintf("pvlab%sv%d", l.id, i+1), Addr: addr}
		peer := fmt.Sprintf("pvlab%sp%d", l.id, i+1)
		l.hosts = append(l.hosts, h)
		l.ip("netns", "add", h.NS)
		l.ip("link", "add", h.veth, "type", "veth", "peer", "name", peer)
		l.ip("link", "set", peer, "netns", h.NS)
		l.ip("link", "set", h.veth, "master", l.bridge, "up")
		l.ip("-n", h.NS, "link", "set", peer, "name", "eth0")
		l.ip("-n", h.NS, "addr", "add", netip.PrefixFrom(h.Addr, 24).String(), "dev", "eth0")
		l.ip("-n", h.NS, "link", "set", "eth0", "up")
		l.ip("-n", h.NS, "link", "set", "lo", "up")
		l.ip("-n", h.NS, "route", "add", "default", "via", l.gateway.String())
		// A Service IP the machine's proxy has no rule for fails here
		// rather than leaving by the default route (network safety).
		l.ip("-n", h.NS, "route", "add", "unreachable", controlplane.ServiceCIDR)
		// Pods' traffic to other nodes is routed through the machine.
		if out, err := l.exec(i, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
			t.Fatalf("ip_forward in %s: %v\n%s", h.NS, err, out)
		}
	}
	return l
}

func (l *netLab) forwardRule() []string {
	return []string{"FORWARD", "-i", l.bridge, "-o", l.bridge, "-m", "comment", "--comment", "podvisor e2e lab " + l.id, "-j", "ACCEPT"}
}

func (l *netLab) ip(args ...string) { l.t.Helper(); l.run("ip", args...) }

func (l *netLab) run(name string, args ...string) {
	l.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// command is name ARGS in machine i's network namespace.
func (l *netLab) command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/run/netns/" + l.hosts[i].NS, "--", name}, args...)...)
}

// exec runs a command in machine i's namespace to completion.
func (l *netLab) exec(i int, name string, args ...string) (string, error) {
	out, err := l.command(i, name, args...).CombinedOutput()
	return string(out), err
}

// remove deletes the namespaces (their ends of the veths go with them, and
// with those the bridge's ends), the bridge and the FORWARD rule, then
// checks nothing of the lab is left.
func (l *netLab) remove() {
	for _, h := range l.hosts {
		_ = exec.Command("ip", "netns", "del", h.NS).Run()
		_ = exec.Command("ip", "link", "del", h.veth).Run()
	}
	_ = exec.Command("ip", "link", "del", l.bridge).Run()
	for exec.Command("iptables", append([]string{"-w", "-D"}, l.forwardRule()...)...).Run() == nil {
	}
	// The pod sandboxes' network namespaces, bind mounts in /run/netns.
	for _, a := range l.agents {
		for name := range a.podNetns {
			if _, err := os.Stat("/run/netns/" + name); err == nil {
				l.t.Errorf("agent %s's pod network namespace %s left in /run/netns", a.Node, name)
			}
		}
	}
	if out, _ := exec.Command("ip", "-o", "link").CombinedOutput(); strings.Contains(string(out), "pvlab"+l.id) {
		l.t.Errorf("lab clean-up left links:\n%s", grepLines(string(out), "pvlab"+l.id))
	}
	if out, _ := exec.Command("ip", "netns", "list").CombinedOutput(); strings.Contains(string(out), "pvlab"+l.id) {
		l.t.Errorf("lab clean-up left namespaces:\n%s", grepLines(string(out), "pvlab"+l.id))
	}
	if out, _ := exec.Command("iptables", "-w", "-S", "FORWARD").CombinedOutput(); strings.Contains(string(out), "podvisor e2e lab "+l.id) {
		l.t.Errorf("lab clean-up left a FORWARD rule:\n%s", grepLines(string(out), l.id))
	}
}

// unusedPrefix picks a prefix of the form pattern, its %d from lo to hi,
// that no address or route of the root namespace overlaps.
func unusedPrefix(pattern string, lo, hi int) (netip.Prefix, error) {
	var taken []netip.Prefix
	for _, args := range [][]string{{"-4", "-o", "addr"}, {"-4", "route", "show", "table", "all"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		for _, f := range strings.Fields(string(out)) {
			if p, err := netip.ParsePrefix(f); err == nil {
				taken = append(taken, p)
			} else if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
				taken = append(taken, netip.PrefixFrom(a, 32))
			}
		}
	}
	n := hi - lo + 1
	start := rand.IntN(n)
	for i := range n {
		p := netip.MustParsePrefix(fmt.Sprintf(pattern, lo+(start+i)%n))
		free := true
		for _, t := range taken {
			if t.Bits() > 0 && t.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free %s with %%d in %d-%d", pattern, lo, hi)
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
		"--bind-address", "0.0.0.0", "--advertise-address", l.gateway.String(),
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
	cmd := l.command(i, binary, args...)
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
		a := &labAgent{Node: node, DataDir: t.TempDir(), machine: i, addr: l.hosts[i].Addr, podNetns: map[string]bool{}}
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
