package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	criclient "k8s.io/cri-client/pkg"
)

// podvisor is the `podvisor up` the runner starts, on ports nothing else
// uses and a data dir of its own.
type podvisor struct {
	bin, dataDir, nodeName string
	logPath                string // podvisor's stderr
	agentPort              int
	cmd                    *exec.Cmd
	exited                 chan struct{}
	log                    *os.File
}

func (p *podvisor) kubeconfig() string { return filepath.Join(p.dataDir, "admin.kubeconfig") }

// state is the directory of the data dir's containerd under /run, as
// internal/runtime/containerd.PathsFor names it: its socket, and the path every
// shim of this podvisor has on its command line.
func (p *podvisor) state() string {
	abs, _ := filepath.Abs(p.dataDir)
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join("/run/podvisor", "containerd-"+hex.EncodeToString(sum[:8]))
}

// criEndpoint is the CRI socket of the podvisor's containerd.
func (p *podvisor) criEndpoint() string {
	return "unix://" + filepath.Join(p.state(), "containerd.sock")
}

// kubeletConfig is the node's KubeletConfiguration: eviction only when
// the disk is all but full. The runner's machine is shared (other builds
// fill and free its disk), and upstream's imagefs.available 15% evicted a
// spec's pod and tainted the node with disk-pressure in the middle of a
// run, failing every spec after it; kind's conformance nodes turn disk
// eviction off for the same reason.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  imagefs.available: 1Gi
  nodefs.inodesFree: 5%
  imagefs.inodesFree: 5%
`

// kubeletPort is the kubelet's port, where the e2e framework and specs
// address a node's API (NODE:10250/proxy…, the Proxy specs' explicit
// kubelet port).
const kubeletPort = 10250

// start runs podvisor up and waits for its ready line, which it prints once
// the API server, the node and the runtime are up. Its agent listens on
// the kubelet's port if that is free, else on a free port.
func (p *podvisor) start(clusterCIDR string) error {
	ports := make([]int, 4)
	for i := range ports {
		if i == 1 && portFree(kubeletPort) {
			ports[i] = kubeletPort
			continue
		}
		port, err := pickPort(ports[:i])
		if err != nil {
			return err
		}
		ports[i] = port
	}
	p.agentPort = ports[1]
	log, err := os.Create(p.logPath)
	if err != nil {
		return err
	}
	p.log = log
	// Beside the data dir: podvisor refuses a new data dir with files it
	// does not know.
	cfg := filepath.Join(filepath.Dir(p.dataDir), "kubelet-config.yaml")
	if err := os.WriteFile(cfg, []byte(kubeletConfig), 0o644); err != nil {
		return err
	}
	p.cmd = exec.Command(p.bin, "up", "--data-dir", p.dataDir, "--node-name", p.nodeName, "--config", cfg,
		"--api-port", strconv.Itoa(ports[0]), "--agent-port", strconv.Itoa(ports[1]),
		"--etcd-client-port", strconv.Itoa(ports[2]), "--etcd-peer-port", strconv.Itoa(ports[3]),
		"--cluster-cidr", clusterCIDR)
	p.cmd.Stderr = log
	// Its own process group: a ^C to the runner reaches the runner only,
	// which then stops podvisor in order (pods first).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.exited = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.exited) }()
	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			select {
			case ready <- s.Text():
			default:
			}
		}
	}()
	want := "podvisor is ready: export KUBECONFIG=" + p.kubeconfig()
	select {
	case line := <-ready:
		if line != want {
			return fmt.Errorf("podvisor's first line is %q, want %q (log: %s)", line, want, log.Name())
		}
		return nil
	case <-p.exited:
		return fmt.Errorf("podvisor exited before it was ready: %v (log: %s)", p.cmd.ProcessState, log.Name())
	case <-time.After(3 * time.Minute):
		return fmt.Errorf("podvisor not ready after 3m (log: %s)", log.Name())
	}
}

// importImages imports the tars as a user would.
func (p *podvisor) importImages(tars []string, log io.Writer) error {
	cmd := exec.Command(p.bin, append([]string{"image", "import", "--data-dir", p.dataDir}, tars...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("podvisor image import: %w", err)
	}
	return nil
}

// stop leaves nothing behind: the pods are deleted through the API first,
// so that podvisor's agent stops them as it would on a real node; what is
// left after that is removed through the CRI (podvisor up leaves its
// containers running when it stops, as a kubelet does); then podvisor gets
// SIGTERM, and shims, mounts, state and the pod network of its containerd
// are removed.
func (p *podvisor) stop(logf func(string, ...any)) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.exited:
	default:
		p.deletePods(logf)
		p.purgeSandboxes(logf)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(60 * time.Second):
			logf("podvisor did not stop within 60s of SIGTERM: killing its process group")
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	killUnder(p.state())
	unmountUnder(p.state())
	unmountUnder(p.dataDir)
	_ = os.RemoveAll(p.state())
	p.removePodNetwork()
	// The service proxy leaves its rules when it stops, as upstream's does
	// across restarts, and they would DNAT to pod addresses that are gone
	// (test/e2e's harness removes them the same way; the runner holds its
	// lock, so no other proxy uses them).
	for _, family := range []string{"ip", "ip6"} {
		_ = exec.Command("nft", "delete", "table", family, "kube-proxy").Run()
	}
	if p.log != nil {
		p.log.Close()
	}
}

func (p *podvisor) deletePods(logf func(string, ...any)) {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig())
	if err != nil {
		logf("cleanup: %v", err)
		return
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		logf("cleanup: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		logf("cleanup: list pods: %v", err)
		return
	}
	zero := int64(0)
	for _, pod := range pods.Items {
		// A spec cut short leaves its test finalizers behind, which keep
		// the pod in the API however long podvisor has stopped it.
		if len(pod.Finalizers) > 0 {
			_, _ = c.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		_ = c.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	for ctx.Err() == nil {
		left, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil || len(left.Items) == 0 {
			return
		}
		time.Sleep(time.Second)
	}
	logf("cleanup: pods still there after 2m; removing them through the CRI")
}

// purgeSandboxes removes every pod sandbox the podvisor's containerd still
// has, with its containers and network.
func (p *podvisor) purgeSandboxes(logf func(string, ...any)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := criclient.NewRemoteRuntimeService(ctx, p.criEndpoint(), 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		logf("cleanup: CRI: %v", err)
		return
	}
	defer rs.Close(context.Background())
	sandboxes, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		logf("cleanup: CRI: %v", err)
		return
	}
	for _, s := range sandboxes {
		if err := rs.StopPodSandbox(ctx, s.Id); err != nil {
			logf("cleanup: stop sandbox %s: %v", s.Id, err)
		}
		if err := rs.RemovePodSandbox(ctx, s.Id); err != nil {
			logf("cleanup: remove sandbox %s: %v", s.Id, err)
		}
	}
}

// removePodNetwork deletes the bridge of the data dir's pod network and its
// masquerade rules (internal/runtime/containerd names the bridge pv-<8 hex> of the
// state directory and comments the rules with it).
func (p *podvisor) removePodNetwork() {
	bridge := "pv-" + strings.TrimPrefix(filepath.Base(p.state()), "containerd-")[:8]
	out, _ := exec.Command("iptables", "-w", "-t", "nat", "-S", "POSTROUTING").Output()
	for _, rule := range strings.Split(string(out), "\n") {
		if !strings.Contains(rule, "podvisor pod network "+bridge) {
			continue
		}
		args := strings.Fields(strings.ReplaceAll(rule, `"podvisor pod network `+bridge+`"`, "COMMENT"))
		for i, a := range args {
			if a == "COMMENT" {
				args[i] = "podvisor pod network " + bridge
			}
		}
		if len(args) > 1 && args[0] == "-A" {
			_ = exec.Command("iptables", append([]string{"-w", "-t", "nat", "-D"}, args[1:]...)...).Run()
		}
	}
	_ = exec.Command("ip", "link", "del", bridge).Run()
}

// killUnder kills the processes whose command line names dir (the shims of
// a containerd) and everything under them.
func killUnder(dir string) {
	roots := map[int]bool{}
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(cmd), dir) {
			roots[pid] = true
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 {
				if f := strings.Fields(string(st[i+1:])); len(f) > 1 {
					parent[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
	}
	for pid := range parent {
		for q := pid; q > 1; q = parent[q] {
			if roots[q] {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
}

// unmountUnder lazily unmounts every mount point under prefix.
func unmountUnder(prefix string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			_ = syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
}

// pickPort returns a port nothing listens on, below Linux's ephemeral range
// (a port from there may be taken by an outgoing connection before podvisor
// binds it), and not one of taken.
func pickPort(taken []int) (int, error) {
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		dup := false
		for _, t := range taken {
			dup = dup || t == port
		}
		if dup {
			continue
		}
		if portFree(port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port below the ephemeral range")
}

// portFree says whether nothing listens on port (all addresses).
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// serviceCIDRs are the cluster's service networks, as its ServiceCIDR
// objects say.
func (p *podvisor) serviceCIDRs() ([]string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig())
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := c.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sc := range list.Items {
		out = append(out, sc.Spec.CIDRs...)
	}
	return out, nil
}
