package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/runtime/containerd"
	"github.com/podvisor/podvisor/test/images"
)

// runtimeEnv picks the runtime every benchmark's node runs its pods on:
// "process" (the default, as the figures recorded first) or "containerd".
const runtimeEnv = "PODVISOR_BENCH_RUNTIME"

func benchRuntime(b *testing.B) string {
	switch r := os.Getenv(runtimeEnv); r {
	case "", "process":
		return "process"
	case "containerd":
		if os.Geteuid() != 0 {
			b.Skip("the containerd runtime needs root")
		}
		if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
			if _, err := os.Stat("/opt/cni/bin/bridge"); err != nil {
				b.Skip("the containerd runtime needs the CNI plugins")
			}
		}
		return r
	default:
		b.Fatalf("%s=%q: want process or containerd", runtimeEnv, r)
		return ""
	}
}

// clusterCIDRs hands each containerd node of this process a pod network of
// its own, 10.250.0.0/16 upwards: the e2e tests take 10.100–10.249.
var clusterCIDRs atomic.Int32

func nextClusterCIDR() string {
	return fmt.Sprintf("10.%d.0.0/16", 250+(clusterCIDRs.Add(1)-1)%6)
}

// importImages imports the busybox and testserver test images (built once
// into $TMPDIR/podvisor-test-images) as a user would.
func (n *node) importImages() {
	b := n.b
	b.Helper()
	args := []string{"image", "import", "--data-dir", n.dataDir}
	for _, name := range []string{"busybox", "testserver"} {
		args = append(args, images.Build(b, name))
	}
	out, err := exec.Command(n.binary, args...).CombinedOutput()
	if err != nil {
		b.Fatalf("podvisor image import: %v\n%s", err, out)
	}
}

// shPod is a one-container pod running script with sh -c, on either
// runtime: on containerd it runs the busybox image, with each of hostDirs
// mounted at its own path so that the script's files reach the host.
func (n *node) shPod(ns, name string, policy v1.RestartPolicy, script string, hostDirs ...string) *v1.Pod {
	pod := shPod(ns, name, policy, script)
	if n.runtime != "containerd" {
		return pod
	}
	c := &pod.Spec.Containers[0]
	c.Image, c.ImagePullPolicy = images.BusyboxImage, v1.PullIfNotPresent
	for i, dir := range hostDirs {
		vol := fmt.Sprintf("host-%d", i)
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: vol,
			VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir}}})
		c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: vol, MountPath: dir})
	}
	return pod
}

// criRuntime connects to the node's containerd.
func (n *node) criRuntime(ctx context.Context) (internalapi.RuntimeService, error) {
	paths, err := containerd.PathsFor(n.dataDir)
	if err != nil {
		return nil, err
	}
	// A minute per call: a loaded machine takes more than 10 s to stop a
	// sandbox while 99 others are being stopped.
	return criclient.NewRemoteRuntimeService(ctx, paths.Endpoint(), time.Minute, nil, false)
}

// hostPids maps container IDs (without "containerd://") to their main
// processes' host pids, read from the verbose CRI status.
func (n *node) hostPids(ids []string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := n.criRuntime(ctx)
	if err != nil {
		return nil, err
	}
	defer rs.Close(ctx)
	out := make(map[string]int, len(ids))
	for _, id := range ids {
		resp, err := rs.ContainerStatus(ctx, id, true)
		if err != nil {
			return nil, err
		}
		var info struct {
			Pid int `json:"pid"`
		}
		if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
			return nil, fmt.Errorf("container %s: no pid in its verbose status (%v)", id, err)
		}
		out[id] = info.Pid
	}
	return out, nil
}

// purgeContainerd removes every sandbox of the node's containerd through
// the CRI, with its containers, shim and network namespace.
func (n *node) purgeContainerd() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rs, err := n.criRuntime(ctx)
	if err != nil {
		return
	}
	defer rs.Close(ctx)
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return
	}
	for _, pod := range pods {
		if err := rs.StopPodSandbox(ctx, pod.Id); err != nil {
			n.b.Logf("purge: stop sandbox %s: %v", pod.Id, err)
		}
		if err := rs.RemovePodSandbox(ctx, pod.Id); err != nil {
			n.b.Logf("purge: remove sandbox %s: %v", pod.Id, err)
		}
	}
}

// removeContainerdState kills what is left under the node's containerd
// state directory (shims and their children), unmounts and removes it, and
// removes the bridge and masquerade rule of the node's pod network.
func (n *node) removeContainerdState() {
	paths, err := containerd.PathsFor(n.dataDir)
	if err != nil {
		return
	}
	parent := map[int]int{}
	shim := map[int]bool{}
	for _, pid := range pids() {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmd, []byte(paths.State)) {
			shim[pid] = true
		}
		parent[pid] = ppid(pid)
	}
	for pid := range parent {
		for p := pid; p > 1; p = parent[p] {
			if shim[p] {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for line := range strings.SplitSeq(string(mi), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && (strings.HasPrefix(f[4], paths.State) || strings.HasPrefix(f[4], n.dataDir)) {
				_ = syscall.Unmount(f[4], syscall.MNT_DETACH)
			}
		}
	}
	_ = os.RemoveAll(paths.State)
	containerd.RemovePodNetwork(paths, "")
}

// stack is the memory and CPU of the node's processes other than podvisor
// itself: the runtime's shims, and containerd on that runtime.
type stack struct {
	containerd shimSet // containerd itself (count 1 on that runtime)
	shims      shimSet // podvisor __shim or containerd-shim-runc-v2
}

func (n *node) stack() stack {
	if n.runtime != "containerd" {
		return stack{shims: shims(n.dataDir)}
	}
	paths, err := containerd.PathsFor(n.dataDir)
	if err != nil {
		return stack{}
	}
	var s stack
	for _, pid := range pids() {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		var set *shimSet
		switch {
		case bytes.Contains(cmd, []byte(containerd.DaemonBinary+"\x00")) && bytes.Contains(cmd, []byte(paths.Config)):
			set = &s.containerd
		case bytes.Contains(cmd, []byte("containerd-shim-runc-v2")) && bytes.Contains(cmd, []byte(paths.State)):
			set = &s.shims
		default:
			continue
		}
		set.addProcess(pid)
	}
	return s
}

// ppid is the parent of pid, 0 if unknown.
func ppid(pid int) int {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(st, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(st[i+1:]))
	if len(f) < 2 {
		return 0
	}
	var p int
	fmt.Sscanf(f[1], "%d", &p)
	return p
}

// mainPids returns how to find a pod's container main process on the host:
// on the process runtime the pid the container wrote (fromFile); in a
// container that pid is its own namespace's, so on containerd the host pid
// comes from the CRI status of the container the API names.
func (n *node) mainPids(ns string, fromFile func(pod string) (int, error)) func(pod string) (int, error) {
	if n.runtime != "containerd" {
		return fromFile
	}
	b := n.b
	b.Helper()
	list, err := n.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	idOf := map[string]string{}
	var ids []string
	for _, pod := range list.Items {
		if len(pod.Status.ContainerStatuses) == 0 {
			continue
		}
		_, id, _ := strings.Cut(pod.Status.ContainerStatuses[0].ContainerID, "://")
		idOf[pod.Name] = id
		ids = append(ids, id)
	}
	pidOf, err := n.hostPids(ids)
	if err != nil {
		b.Fatal(err)
	}
	return func(pod string) (int, error) {
		if pid, ok := pidOf[idOf[pod]]; ok {
			return pid, nil
		}
		return 0, fmt.Errorf("pod %s: no container in the API", pod)
	}
}
