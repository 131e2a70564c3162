package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// §9: the controller manager's pod GC deletes terminated pods beyond
// --terminated-pod-gc-threshold, oldest first.
func TestTerminatedPodGCThreshold(t *testing.T) {
	processRuntimeOnly(t) // the controller manager's pod GC: the same on both runtimes
	t.Parallel()
	p := NewPodvisor(t, "--terminated-pod-gc-threshold", "5")
	p.Start()
	ns := p.Namespace("gc")
	done := func(name string) {
		p.waitPod(t, ns, name, 60*time.Second, "Succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
	}
	create := func(i int) string {
		name := fmt.Sprintf("gc-%d", i)
		p.create(t, p.pod(ns, name, v1.RestartPolicyNever, sh("c", "true")))
		return name
	}
	// The three oldest first; creation times have whole seconds, so the
	// others are created in a later second.
	for i := 1; i <= 3; i++ {
		done(create(i))
	}
	old := time.Now().Truncate(time.Second)
	Eventually(t, 5*time.Second, "the next second", func() (bool, error) { return time.Now().Truncate(time.Second).After(old), nil })
	for i := 4; i <= 8; i++ {
		create(i)
	}
	for i := 4; i <= 8; i++ {
		done(fmt.Sprintf("gc-%d", i))
	}
	// The pod GC runs every 20s.
	Eventually(t, 90*time.Second, "5 pods left", func() (bool, error) {
		list, err := p.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(list.Items) <= 5, nil
	})
	list, err := p.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pod := range list.Items {
		names = append(names, pod.Name)
	}
	if strings.Join(names, ",") != "gc-4,gc-5,gc-6,gc-7,gc-8" {
		t.Errorf("pods left: %v, want gc-4..gc-8 (the oldest deleted first)", names)
	}
}

// Agent is a `podvisor agent` joining a running podvisor up as another node.
type Agent struct {
	t        *testing.T
	server   *Podvisor
	NodeName string
	DataDir  string
	Port     int
	Config   string
	cmd      *exec.Cmd
	stderr   *syncBuffer
	exited   chan struct{}
	imported bool // the busybox test image is in its containerd
}

func (p *Podvisor) newAgent(t *testing.T, name, config string) *Agent {
	a := &Agent{t: t, server: p, NodeName: name, DataDir: t.TempDir(), Port: freePort(t), Config: config}
	t.Cleanup(func() {
		if p.Runtime == "containerd" {
			purgeContainerd(t.Logf, a.DataDir)
		}
		a.Stop()
		killLeftovers(a.DataDir)
		if p.Runtime == "containerd" {
			removeContainerdState(a.DataDir)
		}
	})
	return a
}

// Start runs the agent and waits for its ready line.
func (a *Agent) Start() {
	a.t.Helper()
	args := []string{"agent", "--server-data-dir", a.server.DataDir, "--node-name", a.NodeName,
		"--data-dir", a.DataDir, "--agent-port", strconv.Itoa(a.Port), "--runtime", a.server.Runtime,
		// Its server's node runs no proxy either (NewPodvisor); one network
		// namespace holds one service proxy.
		"--disable-service-proxy"}
	if a.Config != "" {
		args = append(args, "--config", a.Config)
	}
	// Agents share the test machine's address: their DNS would fight over
	// one port, and these tests resolve no names.
	args = append(args, "--disable-cluster-dns")
	if a.server.clusterCIDR != "" {
		// The server's pod network, which the agent routes and does not NAT.
		args = append(args, "--cluster-cidr", a.server.clusterCIDR)
	}
	a.cmd = exec.Command(binary, args...)
	a.cmd.Env = append(os.Environ(), noSystemBus)
	a.stderr = &syncBuffer{}
	a.cmd.Stderr = a.stderr
	out, err := a.cmd.StdoutPipe()
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.exited = make(chan struct{})
	lines := make(chan string, 4)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	go func() { a.cmd.Wait(); close(a.exited) }()
	want := "podvisor agent is ready: node " + a.NodeName
	select {
	case line, ok := <-lines:
		if !ok || line != want {
			a.Stop()
			a.t.Fatalf("agent: first stdout line %q (closed: %v), want %q\nstderr:\n%s", line, !ok, want, a.stderr)
		}
	case <-time.After(2 * time.Minute):
		a.t.Fatalf("agent not ready after 2m; stderr:\n%s", a.stderr)
	}
	go func() {
		for range lines {
		}
	}()
	requireAgentOnly(a.t, a.cmd.Process.Pid)
	if a.server.Runtime == "containerd" && !a.imported {
		// Its containerd is its own: what adapt gives pods, as Start does.
		importImages(a.t, a.DataDir, "busybox")
		a.imported = true
	}
}

// Stop sends SIGTERM and waits; the containers keep running, as with any
// agent restart.
func (a *Agent) Stop() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	if terminate(a.cmd, a.exited) {
		a.t.Errorf("agent %s did not stop within 60s of SIGTERM", a.NodeName)
	}
}

// §9/§10 non-graceful shutdown: a node whose agent stopped goes NotReady;
// with the out-of-service taint its pods, terminating or not, are deleted
// from the API; when its agent comes back it kills what the API no longer
// has and does not bring any of it back.
func TestOutOfServiceTaint(t *testing.T) {
	t.Parallel()
	// Heartbeats every 2s and NotReady after 16s of silence keep this short.
	cfg := kubeletConfig(t, "nodeLeaseDurationSeconds: 8\nnodeStatusUpdateFrequency: 2s\n")
	p := NewPodvisor(t, "--config", cfg, "--node-monitor-grace-period", "16s")
	p.Env = []string{noSystemBus}
	p.Start()
	ns := p.Namespace("outofservice")
	a := p.newAgent(t, "worker-"+strings.ToLower(strings.TrimPrefix(p.NodeName, "node-")), cfg)
	a.Start()

	pods := map[string]string{} // name -> process tag
	for _, name := range []string{"terminating", "running"} {
		c := sh("c", `trap '' TERM; while true; do sleep 0.2; done`)
		pods[name] = tagProcesses(&c)
		pod := p.pod(ns, name, v1.RestartPolicyAlways, c)
		pod.Spec.NodeName = a.NodeName
		pod.Spec.TerminationGracePeriodSeconds = nil // the API's default, 30s
		p.create(t, pod)
	}
	// A pod that tolerates a NotReady/unreachable node for 5 s only: evicted 5 s
	// after the node goes NotReady, where the default toleration is 300 s.
	tolerant := p.pod(ns, "tolerant", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
	tolerant.Spec.NodeName = a.NodeName
	for _, key := range []string{"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} {
		tolerant.Spec.Tolerations = append(tolerant.Spec.Tolerations, v1.Toleration{
			Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptrInt64(5)})
	}
	p.create(t, tolerant)
	for _, name := range []string{"terminating", "running", "tolerant"} {
		p.waitPod(t, ns, name, 60*time.Second, "Running on the joined node", func(pod *v1.Pod) bool {
			return pod.Status.Phase == v1.PodRunning && isReady(pod)
		})
	}
	a.Stop()
	for name, tag := range pods {
		if len(taggedProcesses(tag)) == 0 {
			t.Fatalf("pod %s's process stopped with its agent; containers must outlive the agent", name)
		}
	}
	if err := p.Admin.CoreV1().Pods(ns).Delete(context.Background(), "terminating", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 90*time.Second, "node "+a.NodeName+" NotReady", func() (bool, error) {
		c, err := nodeReadyCondition(p, a.NodeName)
		return err == nil && c.Status != v1.ConditionTrue, err
	})
	// The node lifecycle controller marks the pods of a NotReady node not Ready...
	p.waitPod(t, ns, "running", 30*time.Second, "Ready=False on the NotReady node", func(pod *v1.Pod) bool {
		c := condition(pod, v1.PodReady)
		return c != nil && c.Status == v1.ConditionFalse
	})
	// ...and the taint eviction controller evicts those whose toleration ran out.
	Eventually(t, 60*time.Second, "pod tolerant evicted after its 5 s toleration", func() (bool, error) {
		pod, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), "tolerant", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && pod.DeletionTimestamp != nil), nil
	})
	if running, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), "running", metav1.GetOptions{}); err != nil || running.DeletionTimestamp != nil {
		t.Errorf("pod running (default 300 s toleration) must not be evicted yet: %v", err)
	}
	pod, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), "terminating", metav1.GetOptions{})
	if err != nil || pod.DeletionTimestamp == nil {
		t.Fatalf("pod terminating: want it stuck terminating on the dead node (%v)\n%s", err, describe(pod))
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := p.Admin.CoreV1().Nodes().Get(context.Background(), a.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute})
		_, err = p.Admin.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The taint eviction deletes the running pod; the pod GC (every 20s)
	// force-deletes both, since no agent will ever confirm.
	for name := range pods {
		Eventually(t, 90*time.Second, "pod "+name+" deleted from the API", func() (bool, error) {
			_, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		})
	}

	a.Start()
	for name, tag := range pods {
		Eventually(t, 30*time.Second, "the process of pod "+name+" killed by the returning agent", func() (bool, error) {
			return len(taggedProcesses(tag)) == 0, nil
		})
	}
	list, err := p.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("pods after the agent came back: %d (%v), want none", len(list.Items), err)
	}
	entries, _ := os.ReadDir(filepath.Join(a.DataDir, "agent", "pods"))
	if len(entries) != 0 {
		t.Errorf("pod directories left in the agent's data dir: %d", len(entries))
	}
}

func ptrInt64(v int64) *int64 { return &v }

// §9: pods bound to a node that does not exist are deleted by the pod GC
// (after its 40 s quarantine).
func TestPodsOfAMissingNodeAreDeleted(t *testing.T) {
	processRuntimeOnly(t) // the controller manager's pod GC: the same on both runtimes
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("ghost")
	pod := p.pod(ns, "orphan", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
	pod.Spec.NodeName = "no-such-node"
	p.create(t, pod)
	Eventually(t, 120*time.Second, "pod of a missing node deleted", func() (bool, error) {
		_, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), "orphan", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
