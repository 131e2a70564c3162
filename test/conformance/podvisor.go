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
	*daemon
}

func (p *podvisor) kubeconfig() string { return filepath.Join(p.dataDir, "admin.kubeconfig") }

// containerdState is the directory of dataDir's containerd under /run, as
// internal/runtime/containerd.PathsFor names it: its socket, and the path every
// shim of this podvisor has on its command line.
func containerdState(dataDir string) string {
	abs, _ := filepath.Abs(dataDir)
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join("/run/podvisor", "containerd-"+hex.EncodeToString(sum[:8]))
}

// criEndpoint is the CRI socket of the podvisor's containerd.
func (p *podvisor) criEndpoint() string { return criEndpoint(p.dataDir) }

// criEndpoint is the CRI socket of dataDir's containerd.
func criEndpoint(dataDir string) string {
	return "unix://" + filepath.Join(containerdState(dataDir), "containerd.sock")
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
	// Beside the data dir: podvisor refuses a new data dir with files it
	// does not know.
	cfg, err := writeKubeletConfig(filepath.Dir(p.dataDir))
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, "up", "--data-dir", p.dataDir, "--node-name", p.nodeName, "--config", cfg,
		"--api-port", strconv.Itoa(ports[0]), "--agent-port", strconv.Itoa(ports[1]),
		"--etcd-client-port", strconv.Itoa(ports[2]), "--etcd-peer-port", strconv.Itoa(ports[3]),
		"--cluster-cidr", clusterCIDR)
	p.daemon, err = startDaemon("podvisor", cmd, p.logPath, "podvisor is ready: export KUBECONFIG="+p.kubeconfig())
	return err
}

// writeKubeletConfig writes kubeletConfig into dir and returns its path.
func writeKubeletConfig(dir string) (string, error) {
	cfg := filepath.Join(dir, "kubelet-config.yaml")
	return cfg, os.WriteFile(cfg, []byte(kubeletConfig), 0o644)
}

// daemon is a podvisor process the runner started (up, server, an agent),
// its stderr in a log file.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

// startDaemon starts cmd, its stderr to logPath, and waits up to 3 minutes
// for its first stdout line, which must be ready (podvisor prints it once
// it is up).
func startDaemon(name string, cmd *exec.Cmd, logPath, ready string) (*daemon, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	d := &daemon{name: name, cmd: cmd, exited: make(chan struct{}), log: log}
	cmd.Stderr = log
	// Its own process group: a ^C to the runner reaches the runner only,
	// which then stops podvisor in order (pods first).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	go func() { cmd.Wait(); close(d.exited) }()
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			select {
			case lines <- s.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		if line == ready {
			return d, nil
		}
		err = fmt.Errorf("%s's first line is %q, want %q (log: %s)", name, line, ready, logPath)
	case <-d.exited:
		err = fmt.Errorf("%s exited before it was ready: %v (log: %s)", name, cmd.ProcessState, logPath)
	case <-time.After(3 * time.Minute):
		err = fmt.Errorf("%s not ready after 3m (log: %s)", name, logPath)
	}
	d.terminate(func(string, ...any) {})
	return nil, err
}

// running says whether the process has not exited.
func (d *daemon) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// terminate sends SIGTERM and waits; after 60 s it kills the process group.
func (d *daemon) terminate(logf func(string, ...any)) {
	if d.running() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(60 * time.Second):
			logf("%s did not stop within 60s of SIGTERM: killing its process group", d.name)
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.exited
		}
	}
	d.log.Close()
}

// importImages imports the tars as a user would.
func (p *podvisor) importImages(tars []string, log io.Writer) error {
	return importImages(p.bin, p.dataDir, tars, log)
}

// importImages imports the tars into dataDir's containerd.
func importImages(bin, dataDir string, tars []string, log io.Writer) error {
	cmd := exec.Command(bin, append([]string{"image", "import", "--data-dir", dataDir}, tars...)...)
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
	// A podvisor that failed to start was stopped by startDaemon, and may
	// have left its containerd's state all the same.
	if p.daemon != nil {
		if p.running() {
			deletePods(p.kubeconfig(), logf)
			purgeSandboxes(p.criEndpoint(), logf)
		}
		p.terminate(logf)
	}
	removeContainerd(p.dataDir)
	removePodNetwork(p.dataDir)
	// The service proxy leaves its rules when it stops, as upstream's does
	// across restarts, and they would DNAT to pod addresses that are gone
	// (test/e2e's harness removes them the same way; the runner holds its
	// lock, so no other proxy uses them).
	for _, family := range []string{"ip", "ip6"} {
		_ = exec.Command("nft", "delete", "table", family, "kube-proxy").Run()
	}
}

// removeContainerd removes what the containerd of dataDir leaves: its
// shims, mounts and state.
func removeContainerd(dataDir string) {
	st := containerdState(dataDir)
	killUnder(st)
	unmountUnder(st)
	unmountUnder(dataDir)
	_ = os.RemoveAll(st)
}

// deletePods deletes every pod through the API of kubeconfig and waits up
// to 2 minutes for them to be gone.
func deletePods(kubeconfig string, logf func(string, ...any)) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
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

// purgeSandboxes removes every pod sandbox the CRI at endpoint still has,
// with its containers and network.
func purgeSandboxes(endpoint string, logf func(string, ...any)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := criclient.NewRemoteRuntimeService(ctx, endpoint, 10*time.Second, noop.NewTracerProvider(), false)
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
func removePodNetwork(dataDir string) {
	bridge := "pv-" + strings.TrimPrefix(filepath.Base(containerdState(dataDir)), "containerd-")[:8]
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
func serviceCIDRs(kubeconfig string) ([]string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
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
