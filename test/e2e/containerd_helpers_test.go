package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/runtime/containerd"
	"github.com/podvisor/podvisor/test/images"
)

// clusterCIDRs counts the pod networks tried: 10.100.0.0/16 onwards, one per
// podvisor.
var clusterCIDRs atomic.Int32

// cidrClaims holds a file per claimed pod network, naming the test binary's
// PID: e2e runs of several checkouts at once never give two podvisors one
// subnet (their routes and masquerade rules would collide).
const cidrClaims = "/tmp/podvisor-e2e-cidrs"

func nextClusterCIDR() string {
	_ = os.MkdirAll(cidrClaims, 0o755)
	for range 150 {
		n := 100 + clusterCIDRs.Add(1)%150
		if claimSubnet(n) {
			return fmt.Sprintf("10.%d.0.0/16", n)
		}
	}
	// Every subnet claimed: share one rather than fail the test.
	return fmt.Sprintf("10.%d.0.0/16", 100+clusterCIDRs.Add(1)%150)
}

// claimSubnet takes 10.n/16 for this process unless a live process holds it.
func claimSubnet(n int32) bool {
	path := fmt.Sprintf("%s/10.%d", cidrClaims, n)
	me := strconv.Itoa(os.Getpid())
	for range 2 {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_, _ = f.WriteString(me)
			_ = f.Close()
			clearSubnet(n) // nobody held it: whatever uses it is left over
			return true
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if string(b) == me {
			return true
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && pid > 0 && syscall.Kill(pid, 0) == nil {
			return false
		}
		_ = os.Remove(path) // its process is gone
	}
	return false
}

// clearSubnet removes what a killed test binary left of pod network 10.n/16:
// the network namespaces of its pods (which would answer ARP for addresses
// the next podvisor hands out again, on a bridge of the same name) and its
// bridge, which the next podvisor's CNI makes anew.
func clearSubnet(n int32) {
	prefix := fmt.Sprintf(" inet 10.%d.", n)
	if entries, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, e := range entries {
			out, err := exec.Command("ip", "-n", e.Name(), "-o", "-4", "addr", "show").Output()
			if err == nil && strings.Contains(string(out), prefix) {
				_ = exec.Command("ip", "netns", "delete", e.Name()).Run()
			}
		}
	}
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.Contains(line, prefix) && strings.HasPrefix(f[1], "pv-") {
			_ = exec.Command("ip", "link", "delete", f[1]).Run()
		}
	}
}

// needContainerd skips a test of the containerd runtime in the suite's
// process-runtime run, and on a machine that cannot run containerd.
func needContainerd(t *testing.T) {
	t.Helper()
	if e2eRuntime() != "containerd" {
		// .ci/run runs the suite once per runtime: a test of the containerd
		// runtime's own features runs in the containerd half only.
		t.Skip("tests the containerd runtime: runs in the suite's containerd run, not with PODVISOR_E2E_RUNTIME=" + e2eRuntime())
	}
	if missing := containerdMissing(); missing != "" {
		t.Skip(missing)
	}
}

// containerdMissing says what the machine lacks to run the containerd
// runtime, or "" when it has it all: root, runc and the CNI plugins (.ci/run
// installs Debian's runc and containernetworking-plugins).
func containerdMissing() string {
	if os.Geteuid() != 0 {
		return "the containerd runtime needs root"
	}
	if _, err := exec.LookPath("runc"); err != nil {
		if _, err := os.Stat("/usr/sbin/runc"); err != nil {
			return "the containerd runtime needs runc (Debian: apt-get install runc)"
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		if _, err := os.Stat("/opt/cni/bin/bridge"); err != nil {
			return "the containerd runtime needs the CNI plugins (Debian: apt-get install containernetworking-plugins)"
		}
	}
	return ""
}

// NewContainerdPodvisor is NewPodvisor on the containerd runtime.
func NewContainerdPodvisor(t *testing.T, extra ...string) *Podvisor {
	t.Helper()
	needContainerd(t)
	p := NewPodvisor(t, extra...)
	p.Runtime = "containerd"
	return p
}

// importImages builds the named test images (test/images recipes) and
// imports them with `podvisor image import`, as a user would, into the
// containerd of the podvisor or agent of dataDir.
func importImages(t testing.TB, dataDir string, names ...string) {
	t.Helper()
	args := []string{"image", "import", "--data-dir", dataDir}
	for _, n := range names {
		args = append(args, images.Build(t, n))
	}
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("podvisor image import: %v\n%s", err, out)
	}
}

// purgeContainerd removes, through the CRI, every pod sandbox the
// podvisor's containerd still has, with its containers and network, so that
// a test leaves no container, shim or address behind. Failures go to logf.
func purgeContainerd(logf func(format string, args ...any), dataDir string) {
	paths, err := containerd.PathsFor(dataDir)
	if err != nil {
		return
	}
	// Not serving (its podvisor died): a CRI client would fail validation
	// and leak a connection that redials the socket for the rest of the run.
	if !containerd.Serving(paths.Socket) {
		killShims(paths)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := criclient.NewRemoteRuntimeService(ctx, paths.Endpoint(), 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		killShims(paths)
		return
	}
	defer rs.Close(context.Background())
	pods, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		killShims(paths)
		return
	}
	for _, pod := range pods {
		if err := rs.StopPodSandbox(ctx, pod.Id); err != nil {
			logf("purge: stop sandbox %s: %v", pod.Id, err)
		}
		if err := rs.RemovePodSandbox(ctx, pod.Id); err != nil {
			logf("purge: remove sandbox %s: %v", pod.Id, err)
		}
	}
}

// killShims kills the shims of the data dir's containerd and what runs
// under them, when its containerd is gone and cannot remove them.
func killShims(paths containerd.Paths) {
	shims := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(cmd), paths.State) {
			shims[pid] = true
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 {
				if f := strings.Fields(string(st[i+1:])); len(f) > 1 {
					parent[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
	}
	under := func(pid int) bool {
		for p := pid; p > 1; p = parent[p] {
			if shims[p] {
				return true
			}
		}
		return false
	}
	for pid := range parent {
		if under(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeContainerdState removes what a stopped podvisor's containerd keeps
// outside the data dir: its state directory (mounts under it first), its
// bridge and masquerade rule. Call after killLeftovers.
func removeContainerdState(dataDir string) {
	paths, err := containerd.PathsFor(dataDir)
	if err != nil {
		return
	}
	killShims(paths)
	unmountUnder(paths.State) // the data dir's: killLeftovers
	_ = os.RemoveAll(paths.State)
	containerd.RemovePodNetwork(paths, "")
}

// requireContainerdBinary: a containerd podvisor runs is the
// podvisor-containerd binary beside it (containerd's server is linked into
// nothing else), and there is exactly one for the data dir.
func requireContainerdBinary(t *testing.T, dataDir string) {
	t.Helper()
	paths, err := containerd.PathsFor(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	var exes []string
	for _, pid := range processesWhose("cmdline", func(b []byte) bool {
		return strings.Contains(string(b), "\x00--config\x00"+paths.Config+"\x00")
	}) {
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
			exes = append(exes, exe)
		}
	}
	if len(exes) != 1 || filepath.Base(exes[0]) != containerd.DaemonBinary {
		t.Fatalf("containerd of %s runs as %v, want one %s", dataDir, exes, containerd.DaemonBinary)
	}
}
