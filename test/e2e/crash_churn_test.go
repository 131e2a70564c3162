package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/host/proctree"
	"github.com/podvisor/podvisor/internal/runtime/containerd"
)

// churn keeps about target pods of the crash test's kinds alive on the two
// nodes: it deletes one now and then (graceful, short, or forced) and
// creates another in its place. API errors while podvisor is down are
// expected and ignored.
type churn struct {
	t       *testing.T
	p       *Podvisor
	ns      string
	nodes   []string
	lockDir string
	target  int
	checker *crashChecker
	rng     *rand.Rand

	mu      sync.Mutex
	live    []*v1.Pod
	created int
	forced  int
}

func (c *churn) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(500+c.rng.IntN(1500)) * time.Millisecond):
		}
		c.mu.Lock()
		n := len(c.live)
		c.mu.Unlock()
		if n >= c.target || (n > c.target/2 && c.rng.IntN(2) == 0) {
			c.deleteOne(ctx)
		} else {
			c.create(ctx)
		}
	}
}

func (c *churn) deleteOne(ctx context.Context) {
	c.mu.Lock()
	if len(c.live) == 0 {
		c.mu.Unlock()
		return
	}
	i := c.rng.IntN(len(c.live))
	pod := c.live[i]
	c.live = append(c.live[:i], c.live[i+1:]...)
	grace := int64(c.rng.IntN(4)) // 0 is a force delete
	c.mu.Unlock()
	c.checker.markRequested(pod.UID)
	if grace == 0 {
		c.checker.markForced(pod.UID)
	}
	err := c.p.Admin.CoreV1().Pods(c.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil {
		c.t.Logf("churn: delete %s (grace %d): %v", pod.Name, grace, err)
		return
	}
	if grace == 0 {
		c.mu.Lock()
		c.forced++
		c.mu.Unlock()
	}
}

func (c *churn) create(ctx context.Context) {
	c.mu.Lock()
	c.created++
	n := c.created
	pod := crashPod(c.rng, c.ns, c.nodes[c.rng.IntN(len(c.nodes))], n, c.lockDir)
	c.mu.Unlock()
	c.p.adapt(pod)
	out, err := c.p.Admin.CoreV1().Pods(c.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		c.t.Logf("churn: create %s: %v", pod.Name, err)
		return
	}
	c.mu.Lock()
	c.live = append(c.live, out)
	c.mu.Unlock()
}

// crashPod is a pod of one of the kinds that broke re-adoption: every
// container carries the pod UID in its environment and holds its lock.
func crashPod(rng *rand.Rand, ns, node string, n int, lockDir string) *v1.Pod {
	c := func(name, script string) v1.Container {
		ct := sh(name, lockedScript(lockDir, name, script))
		ct.Env = []v1.EnvVar{{Name: crashEnvVar, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}
		return ct
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns},
		Spec:       v1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](int64(1 + rng.IntN(3)))},
	}
	kind := rng.IntN(8)
	switch kind {
	case 0: // long-running
		pod.Spec.RestartPolicy = v1.RestartPolicyAlways
		pod.Spec.Containers = []v1.Container{c("main", "exec sleep 100000")}
	case 1: // crash loop, Always
		pod.Spec.RestartPolicy = v1.RestartPolicyAlways
		pod.Spec.Containers = []v1.Container{c("main", "sleep 1; exit 1")}
	case 2: // crash loop, OnFailure
		pod.Spec.RestartPolicy = v1.RestartPolicyOnFailure
		pod.Spec.Containers = []v1.Container{c("main", "sleep 2; exit 2")}
	case 3: // one-shot with an exit code
		pod.Spec.RestartPolicy = v1.RestartPolicyNever
		pod.Spec.Containers = []v1.Container{c("main", fmt.Sprintf("sleep %d; exit %d", 1+rng.IntN(3), []int{0, 1, 3}[rng.IntN(3)]))}
	case 4: // OnFailure that succeeds
		pod.Spec.RestartPolicy = v1.RestartPolicyOnFailure
		pod.Spec.Containers = []v1.Container{c("main", "sleep 1; exit 0")}
	case 5: // failing exec liveness probe: killed and restarted
		pod.Spec.RestartPolicy = v1.RestartPolicyAlways
		main := c("main", "exec sleep 100000")
		main.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"test", "-e", "/nonexistent-crash-test"}}},
			InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 2}
		pod.Spec.Containers = []v1.Container{main}
	case 6: // ignores SIGTERM: killed at the end of its grace
		pod.Spec.RestartPolicy = v1.RestartPolicyAlways
		pod.Spec.Containers = []v1.Container{c("main", "trap '' TERM; while true; do sleep 1; done")}
	case 7: // init container, sidecar, main
		pod.Spec.RestartPolicy = v1.RestartPolicyAlways
		side := c("side", "exec sleep 100000")
		side.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
		pod.Spec.InitContainers = []v1.Container{c("init", "sleep 0.5"), side}
		pod.Spec.Containers = []v1.Container{c("main", "sleep 3; exit 0")}
	}
	pod.Name = fmt.Sprintf("k%d-%d", kind, n)
	shareHostDirs(pod, lockDir)
	return pod
}

// leftovers lists what must be gone once every pod is: processes of the
// test's pods, container instances, pod directories.
func leftovers(checker *crashChecker, dataDirs ...string) []string {
	var out []string
	checker.mu.Lock()
	uids := make([]types.UID, 0, len(checker.pods))
	for uid := range checker.pods {
		uids = append(uids, uid)
	}
	checker.mu.Unlock()
	for _, uid := range uids {
		if pids := podProcesses(uid); len(pids) > 0 {
			out = append(out, fmt.Sprintf("processes %v of pod %s", pids, uid))
		}
	}
	table := proctree.Read()
	for _, dir := range dataDirs {
		// Shims of the data dir's containerd: every sandbox is gone.
		if paths, err := containerd.PathsFor(dir); err == nil {
			for _, s := range containerd.ShimsOf(table, paths.Socket) {
				out = append(out, fmt.Sprintf("shim %d of sandbox %s of %s's containerd", s.PID, s.ID, dir))
			}
		}
		// Container instances, sandbox records (the directory that holds
		// them is no leftover), pod directories.
		for _, sub := range []string{"containers", "containers/sandboxes", "pods"} {
			entries, _ := os.ReadDir(filepath.Join(dir, "agent", sub))
			for _, e := range entries {
				if sub == "containers" && e.Name() == "sandboxes" {
					continue
				}
				out = append(out, filepath.Join(dir, "agent", sub, e.Name()))
			}
		}
	}
	return out
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}
