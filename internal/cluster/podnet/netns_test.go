package podnet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/cluster/pki"
	"github.com/podvisor/podvisor/internal/controlplane"
	"github.com/podvisor/podvisor/internal/host/freeport"
)

// childEnv carries a node's Config to the test binary re-executed inside
// that node's network namespace: flannel's netlink calls act on the
// namespace of whichever thread makes them, so the whole process must live
// in it.
const childEnv = "PODNET_TEST_NODE"

// removeEnv makes the re-executed test binary run RemoveRoutes.
const removeEnv = "PODNET_TEST_REMOVE_ROUTES"

func TestMain(m *testing.M) {
	if c := os.Getenv(childEnv); c != "" {
		os.Exit(runChild(c))
	}
	if os.Getenv(removeEnv) != "" {
		RemoveRoutes()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type childConfig struct {
	Kubeconfig, NodeName, NodeIP, ClusterCIDR, Dir string
}

// runChild runs podnet for one node, says "lease" on stdout once Run has
// returned, and goes on until its stdin closes.
func runChild(conf string) int {
	var c childConfig
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := Run(ctx, Config{Kubeconfig: c.Kubeconfig, NodeName: c.NodeName, NodeIP: net.ParseIP(c.NodeIP),
		ClusterCIDR: netip.MustParsePrefix(c.ClusterCIDR), Dir: c.Dir, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "podnet.Run:", err)
		return 1
	}
	fmt.Println("lease")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// testNode is one node of the test: a podnet process in a namespace.
type testNode struct {
	name, ns, ip, podCIDR string
	log                   string // the child's stderr (flannel's klog lines)
}

// Every node gets a route to every other node's pod CIDR via that node's
// address, except to nodes of its own host (which reach each other over
// their bridges); a deleted node's route goes.
//
// Host namespace: bridge with 198.18.77.1, the API server reached through a
// forwarder there. Namespace A holds nodes a and a2 (one host, one
// address, like `podvisor agent --server-data-dir` joins) with their pod
// bridges; namespace B holds node b.
func TestRoutesFollowNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	removeStaleLab(t)
	id := strconv.Itoa(os.Getpid()) // interface names stay within 15 bytes
	nsA, nsB, br := "pvnet-a-"+id, "pvnet-b-"+id, "pvnbr"+id
	a := &testNode{name: "a", ns: nsA, ip: "198.18.77.10", podCIDR: "10.42.1.0/24"}
	a2 := &testNode{name: "a2", ns: nsA, ip: "198.18.77.10", podCIDR: "10.42.3.0/24"}
	b := &testNode{name: "b", ns: nsB, ip: "198.18.77.20", podCIDR: "10.42.2.0/24"}

	t.Cleanup(func() {
		run(t, "ip", "netns", "del", nsA)
		run(t, "ip", "netns", "del", nsB)
		run(t, "ip", "link", "del", br)
	})
	mustRun(t, "ip", "link", "add", br, "type", "bridge")
	mustRun(t, "ip", "addr", "add", "198.18.77.1/24", "dev", br)
	mustRun(t, "ip", "link", "set", br, "up")
	for i, n := range []*testNode{a, b} {
		host, peer := fmt.Sprintf("pvnv%d-%s", i, id), fmt.Sprintf("pvnp%d-%s", i, id)
		mustRun(t, "ip", "netns", "add", n.ns)
		mustRun(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
		mustRun(t, "ip", "link", "set", host, "master", br, "up")
		mustRun(t, "ip", "link", "set", peer, "netns", n.ns)
		mustRun(t, "ip", "-n", n.ns, "addr", "add", n.ip+"/24", "dev", peer)
		mustRun(t, "ip", "-n", n.ns, "link", "set", peer, "up")
		mustRun(t, "ip", "-n", n.ns, "link", "set", "lo", "up")
	}
	// The pod bridges of a and a2: their pod CIDRs' directly connected
	// routes in namespace A.
	for _, n := range []*testNode{a, a2} {
		bridge := "pvn" + n.name + "-" + id
		gw := strings.TrimSuffix(n.podCIDR, "0/24") + "1/24"
		mustRun(t, "ip", "-n", nsA, "link", "add", bridge, "type", "bridge")
		mustRun(t, "ip", "-n", nsA, "addr", "add", gw, "dev", bridge)
		mustRun(t, "ip", "-n", nsA, "link", "set", bridge, "up")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cp, err := controlplane.Start(ctx, controlplane.Config{
		DataDir: filepath.Join(dir, "server"), APIPort: freePort(t), NodeName: "server",
		EtcdClientPort: freePort(t), EtcdPeerPort: freePort(t), LogFile: filepath.Join(dir, "controlplane.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	admin := clientFor(t, pki.AdminKubeconfig(filepath.Join(dir, "server")))
	api := forwardAPI(t, "198.18.77.1", pki.AdminKubeconfig(filepath.Join(dir, "server")))

	var stops []func()
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
	})
	for _, n := range []*testNode{a, a2, b} {
		createNode(ctx, t, admin, n)
		stops = append(stops, startNode(t, dir, api, n))
	}

	// Each node published itself with its own credentials (a status patch).
	for _, n := range []*testNode{a, a2, b} {
		node, err := admin.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Annotations["flannel.alpha.coreos.com/public-ip"]; got != n.ip {
			t.Errorf("node %s: public-ip annotation %q, want %q", n.name, got, n.ip)
		}
	}

	// b routes both nodes of host A via A's address.
	waitRoute(t, nsB, a.podCIDR, "via "+a.ip)
	waitRoute(t, nsB, a2.podCIDR, "via "+a.ip)
	waitRoute(t, nsA, b.podCIDR, "via "+b.ip)
	// Once a and a2 have both handled b's lease, they have handled each
	// other's (published before it): their bridges' routes must be intact.
	waitLog(t, a, "Subnet added: "+b.podCIDR)
	waitLog(t, a2, "Subnet added: "+b.podCIDR)
	for _, n := range []*testNode{a, a2} {
		if got := route(t, nsA, n.podCIDR); strings.Contains(got, "via") || !strings.Contains(got, "dev pvn"+n.name+"-") {
			t.Errorf("namespace A: route to node %s's pods = %q, want its bridge's", n.name, got)
		}
	}
	for _, ns := range []string{nsA, nsB} {
		if got := strings.TrimSpace(output(t, "ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv4/ip_forward")); got != "1" {
			t.Errorf("namespace %s: ip_forward = %s, want 1", ns, got)
		}
	}
	// The route carries traffic: b's connection to a's pod gateway address
	// is refused by a (no "network is unreachable").
	gw := strings.TrimSuffix(a.podCIDR, "0/24") + "1"
	if out, _ := exec.Command("ip", "netns", "exec", nsB, "timeout", "5", "bash", "-c", "exec 3<>/dev/tcp/"+gw+"/9").CombinedOutput(); !strings.Contains(string(out), "Connection refused") {
		t.Errorf("connecting from b to a's pod network: %s, want connection refused by a", out)
	}

	if err := admin.CoreV1().Nodes().Delete(ctx, b.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, nsA, b.podCIDR, "")

	// The routes left behind are podnet's to remove (podvisor reset), and
	// only those.
	if got := route(t, nsB, a.podCIDR); !strings.Contains(got, fmt.Sprintf("proto %d", RouteProtocol)) {
		t.Errorf("namespace B: route to a's pods %q is not marked proto %d", got, RouteProtocol)
	}
	for _, stop := range stops {
		stop()
	}
	stops = nil
	cmd := exec.Command("ip", "netns", "exec", nsB, os.Args[0])
	cmd.Env = append(os.Environ(), removeEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("RemoveRoutes: %v: %s", err, out)
	}
	for _, n := range []*testNode{a, a2} {
		if got := route(t, nsB, n.podCIDR); got != "" {
			t.Errorf("namespace B after RemoveRoutes: route %q", got)
		}
	}
	if got := route(t, nsB, "198.18.77.0/24"); got == "" {
		t.Error("namespace B after RemoveRoutes: its own network's route went too")
	}
}

func createNode(ctx context.Context, t *testing.T, c kubernetes.Interface, n *testNode) {
	t.Helper()
	node, err := c.CoreV1().Nodes().Create(ctx, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.name},
		Spec:       v1.NodeSpec{PodCIDR: n.podCIDR, PodCIDRs: []string{n.podCIDR}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: n.ip}}
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startNode gives n node credentials and runs its podnet in its namespace;
// it returns once the node's lease is published, and the function stopping
// it.
func startNode(t *testing.T, dir, api string, n *testNode) func() {
	t.Helper()
	ndir := filepath.Join(dir, n.name)
	kubeconfig := filepath.Join(ndir, "node.kubeconfig")
	if err := pki.JoinLocal(filepath.Join(dir, "server"), filepath.Join(ndir, "pki"), kubeconfig, n.name, nil); err != nil {
		t.Fatal(err)
	}
	redirect(t, kubeconfig, api)
	conf, _ := json.Marshal(childConfig{Kubeconfig: kubeconfig, NodeName: n.name, NodeIP: n.ip, ClusterCIDR: "10.42.0.0/16", Dir: ndir})
	n.log = filepath.Join(ndir, "podnet.log")
	logf, err := os.Create(n.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.ns, os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+string(conf))
	cmd.Stderr = logf
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
	}
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		s.Scan()
		lines <- s.Text()
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-lines:
		if l == "lease" {
			return stop
		}
	case <-time.After(90 * time.Second):
	}
	stop()
	log, _ := os.ReadFile(n.log)
	t.Fatalf("node %s: no lease:\n%s", n.name, log)
	return nil
}

// forwardAPI listens on addr (reachable from the namespaces) and forwards
// to the API server, which listens on the host's loopback only.
func forwardAPI(t *testing.T, addr, kubeconfig string) string {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	target := strings.TrimPrefix(rc.Host, "https://")
	l, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go io.Copy(s, c)
				io.Copy(c, s)
			}()
		}
	}()
	return "https://" + l.Addr().String()
}

// redirect points a kubeconfig at server, still verifying the API server's
// certificate (issued for localhost).
func redirect(t *testing.T, kubeconfig, server string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server, c.TLSServerName = server, "localhost"
	}
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
}

// route is `ip route` in ns for exactly dst ("" when there is none).
func route(t *testing.T, ns, dst string) string {
	t.Helper()
	return strings.TrimSpace(output(t, "ip", "-n", ns, "route", "show", "exact", dst))
}

// waitRoute waits for ns's route to dst to contain want; want "" waits for
// no route.
func waitRoute(t *testing.T, ns, dst, want string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = route(t, ns, dst)
		if (want == "" && got == "") || (want != "" && strings.Contains(got, want)) {
			return
		}
	}
	t.Fatalf("namespace %s: route to %s = %q, want %q", ns, dst, got, want)
}

func waitLog(t *testing.T, n *testNode, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(n.log); strings.Contains(string(b), want) {
			return
		}
	}
	b, _ := os.ReadFile(n.log)
	t.Fatalf("node %s never logged %q:\n%s", n.name, want, b)
}

func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	exec.Command(name, args...).Run()
}

func output(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(out)
}

// removeStaleLab deletes the bridges and namespaces an earlier run of
// TestRoutesFollowNodes left when it was killed (its cleanup never ran):
// the bridge kept 198.18.77.1, and every later run failed on it. A run's
// names end in its process ID; those of a process still running are left.
func removeStaleLab(t *testing.T) {
	t.Helper()
	alive := func(id string) bool { _, err := os.Stat("/proc/" + id); return err == nil }
	out, _ := exec.Command("ip", "-br", "link", "show", "type", "bridge").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "pvnbr") {
			continue
		}
		if id := strings.TrimPrefix(f[0], "pvnbr"); !alive(id) {
			t.Logf("removing bridge %s, left by an earlier run", f[0])
			run(t, "ip", "link", "del", f[0])
		}
	}
	out, _ = exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "pvnet-") {
			continue
		}
		if id := f[0][strings.LastIndexByte(f[0], '-')+1:]; !alive(id) {
			t.Logf("removing network namespace %s, left by an earlier run", f[0])
			run(t, "ip", "netns", "del", f[0])
		}
	}
}
