package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/test/images"
)

var (
	sharedOnce sync.Once
	shared     *Podvisor
)

// Shared returns one podvisor for the tests that do not restart it; cases run
// in parallel against it to keep the suite's wall time down.
func Shared(t *testing.T) *Podvisor {
	t.Helper()
	sharedOnce.Do(func() {
		// Start-up failures are reported on the first test that asked.
		p := &Podvisor{t: t, DataDir: mustTemp("podvisor-shared"), NodeName: "shared-node",
			Runtime: e2eRuntime(), shared: true}
		p.APIPort, p.Agent = mustFreePort(), mustFreePort()
		p.Start()
		shared = p
	})
	if shared == nil {
		t.Fatal("shared podvisor did not start (see the first test that used it)")
	}
	return shared
}

// stopShared is called from TestMain; after a failed run the shared data
// dir (its podvisor.log) is kept for the post-mortem.
func stopShared(failed bool) {
	if shared != nil {
		if shared.Runtime == "containerd" {
			// After the tests: no test to log to.
			purgeContainerd(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }, shared.DataDir)
		}
		shared.Stop()
		killLeftovers(shared.DataDir)
		if shared.Runtime == "containerd" {
			removeContainerdState(shared.DataDir)
		}
		if failed {
			fmt.Fprintf(os.Stderr, "shared podvisor's data dir kept: %s\n", shared.DataDir)
			return
		}
		os.RemoveAll(shared.DataDir)
	}
}

// killLeftovers kills container processes a test left behind under dataDir
// (containers outlive podvisor by design): the shims, whose command line names
// the data dir, and the containers, whose environment does (the termination
// message path).
func killLeftovers(dataDir string) {
	_ = exec.Command("pkill", "-KILL", "-f", dataDir).Run()
	// Memory emptyDirs are tmpfs mounts under the data dir: lazily unmount them.
	unmountUnder(dataDir)
	for _, pid := range processesWhoseEnv(func(env []byte) bool { return bytes.Contains(env, []byte(dataDir)) }) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// Containers of the data dir's containerd whose shim is gone (a sandbox
	// removed by the clean-up's purge while the agent was stopping it
	// gracefully left them under init, seen with TestRecreatedPodsStartPromptly):
	// their root file system is a snapshot under the data dir.
	for _, pid := range processesWhose("mountinfo", func(mi []byte) bool { return rootMountFrom(mi, dataDir) }) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// rootMountFrom reports whether a process's mountinfo has its "/" mounted
// from a path under dir (an overlay of a snapshot there).
func rootMountFrom(mountinfo []byte, dir string) bool {
	for _, line := range bytes.Split(mountinfo, []byte("\n")) {
		if f := bytes.Fields(line); len(f) > 4 && string(f[4]) == "/" && bytes.Contains(line, []byte(dir+"/")) {
			return true
		}
	}
	return false
}

// unmountUnder lazily unmounts every mount point whose path starts with prefix.
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

// processesWhoseEnv lists the live processes (zombies are dead) other than
// this one whose environment matches.
func processesWhoseEnv(match func(env []byte) bool) []int { return processesWhose("environ", match) }

// processesWhose lists the live processes other than this one whose
// /proc/PID/<file> matches.
func processesWhose(file string, match func([]byte) bool) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/" + file)
		if err != nil || !match(b) {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

func mustTemp(prefix string) string {
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		panic(err)
	}
	return d
}

func mustFreePort() int {
	port, err := pickPort()
	if err != nil {
		panic(err)
	}
	return port
}

// pod builds a pod bound to the node with the given containers.
func (p *Podvisor) pod(ns, name string, policy v1.RestartPolicy, containers ...v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{
			RestartPolicy:                 policy,
			Containers:                    containers,
			TerminationGracePeriodSeconds: ptr.To[int64](2),
		},
	}
}

// adapt makes a pod written for the process runtime ("none" images,
// host commands) run on the containerd runtime: its containers run the
// busybox test image, whose shell and applets the scripts use.
func (p *Podvisor) adapt(pod *v1.Pod) {
	if p.Runtime != "containerd" {
		return
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Image == "none" {
				list[i].Image, list[i].ImagePullPolicy = images.BusyboxImage, v1.PullIfNotPresent
			}
		}
	}
}

func sh(name, script string) v1.Container {
	return v1.Container{Name: name, Image: "none", Command: []string{"sh", "-c", script}}
}

func (p *Podvisor) create(t *testing.T, pod *v1.Pod) *v1.Pod {
	t.Helper()
	p.adapt(pod)
	out, err := p.Admin.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return out
}

// waitPod polls the pod until cond holds; it returns the pod that satisfied it.
func (p *Podvisor) waitPod(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*v1.Pod) bool) *v1.Pod {
	t.Helper()
	var last *v1.Pod
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		pod, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			last = pod
			if cond(pod) {
				return pod
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pod %s/%s: timed out after %v waiting for %s; last status:\n%s", ns, name, timeout, what, describe(last))
	return nil
}

func describe(pod *v1.Pod) string {
	if pod == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s reason=%q message=%q\n", pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
	for _, c := range pod.Status.Conditions {
		fmt.Fprintf(&b, "  condition %s=%s reason=%q message=%q\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			fmt.Fprintf(&b, "  container %s: restarts=%d ready=%v state=%s last=%s\n", cs.Name, cs.RestartCount, cs.Ready, stateString(cs.State), stateString(cs.LastTerminationState))
		}
	}
	return b.String()
}

func stateString(s v1.ContainerState) string {
	switch {
	case s.Waiting != nil:
		return fmt.Sprintf("waiting(%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	case s.Running != nil:
		return fmt.Sprintf("running(since %s)", s.Running.StartedAt.Format(time.RFC3339))
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(%s, exit %d: %s)", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "none"
}

func containerStatus(pod *v1.Pod, name string) *v1.ContainerStatus {
	for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func condition(pod *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

func isReady(pod *v1.Pod) bool {
	c := condition(pod, v1.PodReady)
	return c != nil && c.Status == v1.ConditionTrue
}

// counterScript exits 1 on its first run, 0 on its second, then runs forever:
// the upstream "Container Runtime blackbox test" container. The count lives in
// file, which outlives the container: a host file (see shareHostDirs).
func counterScript(file string) string {
	return fmt.Sprintf(`echo hello >> %[1]s; count=$(wc -l < %[1]s); if [ "$count" -eq 1 ]; then exit 1; fi; if [ "$count" -eq 2 ]; then exit 0; fi; while true; do sleep 1; done`, file)
}

func osReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

func resourceMust(s string) resource.Quantity { return resource.MustParse(s) }
