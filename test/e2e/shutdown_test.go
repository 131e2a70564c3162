package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/shutdown/fakelogind"
)

// noSystemBus keeps a podvisor away from the machine's real logind: a CI
// machine with systemd must not get an inhibitor lock from a test.
const noSystemBus = "DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/podvisor-test-bus"

// kubeletConfig writes a KubeletConfiguration with the given fields.
func kubeletConfig(t *testing.T, fields string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubelet.yaml")
	body := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + fields
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeLogind runs a private bus with a fake systemd-logind on it.
func fakeLogind(t *testing.T, inhibitDelayMax time.Duration) (*fakelogind.Bus, *fakelogind.Logind) {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Fatal("dbus-daemon is required (Debian package dbus; .ci/run installs it)")
	}
	bus, err := fakelogind.StartBus(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Stop)
	l, err := fakelogind.Start(bus.Address, inhibitDelayMax)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return bus, l
}

// inhibitLock waits for the n-th (from 0) inhibitor lock.
func inhibitLock(t *testing.T, l *fakelogind.Logind, n int, timeout time.Duration) *fakelogind.Lock {
	t.Helper()
	lock, err := l.WaitLock(n, timeout)
	if err != nil {
		t.Fatalf("the agent's inhibitor locks: %v", err)
	}
	return lock
}

func nodeReadyCondition(p *Podvisor, name string) (*v1.NodeCondition, error) {
	n, err := p.Admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			return &n.Status.Conditions[i], nil
		}
	}
	return nil, fmt.Errorf("node %s has no Ready condition", name)
}

// waitNodeShuttingDown waits for Ready=False with the shutdown message.
func waitNodeShuttingDown(t *testing.T, p *Podvisor, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, "node NotReady: node is shutting down", func() (bool, error) {
		c, err := nodeReadyCondition(p, p.NodeName)
		return err == nil && c.Status == v1.ConditionFalse && c.Message == "node is shutting down" && c.Reason == "KubeletNotReady", err
	})
}

func waitNodeReadyAgain(t *testing.T, p *Podvisor, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, "node Ready again", func() (bool, error) {
		c, err := nodeReadyCondition(p, p.NodeName)
		return err == nil && c.Status == v1.ConditionTrue, err
	})
}

// stubbornPod ignores SIGTERM, so it runs until its grace ends; it notes
// when it got the signal (seconds since boot) in the host file dir/<name>.
// Once its trap is set it writes dir/<name>.armed: Running can be reported
// before the shell has run its first command, and a SIGTERM that comes
// earlier ends the shell (on the process runtime, where it is not PID 1)
// without a mark; waitArmed waits for that file.
func stubbornPod(p *Podvisor, ns, name, dir string, grace int64, class string) *v1.Pod {
	mark := filepath.Join(dir, name)
	pod := p.pod(ns, name, v1.RestartPolicyAlways,
		sh("c", armedTrap(dir, name, timestamp+" > "+mark, "while true; do sleep 0.2; done")))
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
	pod.Spec.PriorityClassName = class
	shareHostDirs(pod, dir)
	return pod
}

// podWatch polls the pods of a namespace: it fails the test if one is ever
// Failed and Ready at once, and records when each was first seen Failed.
type podWatch struct {
	mu       sync.Mutex
	failedAt map[string]time.Time
	bad      []string
	stop     chan struct{}
	done     chan struct{}
}

func watchPods(t *testing.T, p *Podvisor, ns string) *podWatch {
	w := &podWatch{failedAt: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			list, err := p.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			for i := range list.Items {
				pod := &list.Items[i]
				if pod.Status.Phase != v1.PodFailed {
					continue
				}
				if isReady(pod) {
					w.bad = append(w.bad, pod.Name+":\n"+describe(pod))
				}
				if _, ok := w.failedAt[pod.Name]; !ok {
					w.failedAt[pod.Name] = now
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.finish(t) })
	return w
}

func (w *podWatch) failed(name string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.failedAt[name]
	return at, ok
}

// finish stops the watch and reports pods seen Failed and Ready at once.
func (w *podWatch) finish(t *testing.T) {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	<-w.done
	for _, b := range w.bad {
		t.Errorf("pod seen Failed and Ready at once: %s", b)
	}
}

func checkShutdownTerminated(t *testing.T, pod *v1.Pod) {
	t.Helper()
	if pod.Status.Phase != v1.PodFailed || pod.Status.Reason != "Terminated" ||
		pod.Status.Message != "Pod was terminated in response to imminent node shutdown." {
		t.Errorf("pod %s: want Failed/Terminated with the shutdown message; got\n%s", pod.Name, describe(pod))
	}
	c := condition(pod, v1.DisruptionTarget)
	if c == nil || c.Status != v1.ConditionTrue || c.Reason != "TerminationByKubelet" {
		t.Errorf("pod %s: want condition DisruptionTarget=True reason TerminationByKubelet; got\n%s", pod.Name, describe(pod))
	}
}

func isTerminatedByShutdown(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodFailed && pod.Status.Reason == "Terminated"
}

// isShutDown: terminated by the shutdown and nothing of it runs any more.
func isShutDown(pod *v1.Pod) bool {
	if !isTerminatedByShutdown(pod) || len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

// agentGet fetches a path of the agent API with the admin certificate.
func agentGet(t *testing.T, p *Podvisor, path string) string {
	t.Helper()
	tlsCfg, err := rest.TLSConfigFor(p.AdminCfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone()}, Timeout: 10 * time.Second}
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d%s", p.Agent, path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", path, resp.Status, b)
	}
	return string(b)
}

// metricValue reads one unlabelled sample from the Prometheus text format.
func metricValue(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			return v, err == nil
		}
	}
	return 0, false
}

func nodeEvents(t *testing.T, p *Podvisor, reason string) []string {
	t.Helper()
	evs, err := p.Admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == p.NodeName && e.Reason == reason {
			out = append(out, e.Type+" "+e.Message)
		}
	}
	return out
}

// §10, the upstream "graceful node shutdown" node test: shutdownGracePeriod
// 20s, critical 10s, triggered by logind's PrepareForShutdown over D-Bus.
// Non-critical pods stop in the first 10s while critical ones still run, all
// within the 20s; the delay lock is released at the end; a cancel brings the
// node back.
func TestGracefulShutdownLogind(t *testing.T) {
	t.Parallel()
	bus, logind := fakeLogind(t, 10*time.Second)
	p := NewPodvisor(t, "--config", kubeletConfig(t, "shutdownGracePeriod: 20s\nshutdownGracePeriodCriticalPods: 10s\n"))
	p.Env = []string{"DBUS_SYSTEM_BUS_ADDRESS=" + bus.Address}
	p.Start()
	lock := inhibitLock(t, logind, 0, 30*time.Second)
	if lock.What != "shutdown" || lock.Mode != "delay" {
		t.Errorf("inhibitor lock %+v, want a delay lock on shutdown", lock)
	}
	Eventually(t, 30*time.Second, "a Warning event about logind's 10s InhibitDelayMaxSec", func() (bool, error) {
		evs := nodeEvents(t, p, "InhibitDelayTooShort")
		return len(evs) > 0 && strings.HasPrefix(evs[0], "Warning ") && strings.Contains(evs[0], "InhibitDelayMaxSec (10s)"), nil
	})

	ns := p.Namespace("shutdown")
	marks := t.TempDir()
	pods := []*v1.Pod{
		stubbornPod(p, ns, "period-120", marks, 120, ""),
		stubbornPod(p, ns, "period-5", marks, 5, ""),
		stubbornPod(p, ns, "critical-period-120", marks, 120, "system-node-critical"),
		stubbornPod(p, ns, "critical-period-5", marks, 5, "system-node-critical"),
	}
	for _, pod := range pods {
		p.create(t, pod)
	}
	for _, pod := range pods {
		p.waitPod(t, ns, pod.Name, 60*time.Second, "Running and Ready", func(pod *v1.Pod) bool {
			return pod.Status.Phase == v1.PodRunning && isReady(pod)
		})
		waitArmed(t, marks, pod.Name)
	}
	watch := watchPods(t, p, ns)

	start := time.Now()
	if err := logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	waitNodeShuttingDown(t, p, 30*time.Second)

	// A new pod is rejected while the node shuts down, even one bound to it
	// past the scheduler (which sees the not-ready taint).
	late := p.pod(ns, "late", v1.RestartPolicyAlways, sh("c", "sleep 1000"))
	late.Spec.NodeName = p.NodeName
	p.create(t, late)
	p.waitPod(t, ns, late.Name, 30*time.Second, "rejected: NodeShutdown", func(pod *v1.Pod) bool {
		return pod.Status.Phase == v1.PodFailed && pod.Status.Reason == "NodeShutdown" &&
			// upstream's kubelet puts every admission message behind this prefix
			pod.Status.Message == "Pod was rejected: Pod was rejected as the node is shutting down."
	})

	for _, name := range []string{"period-120", "period-5"} {
		p.waitPod(t, ns, name, 30*time.Second-time.Since(start), "Failed", isTerminatedByShutdown)
	}
	for _, name := range []string{"critical-period-120", "critical-period-5"} {
		pod, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase != v1.PodRunning {
			t.Errorf("critical pod %s must be Running while the regular pods stop; got\n%s", name, describe(pod))
		}
	}
	// The phase turns Failed as soon as the agent starts stopping a pod (as
	// upstream); "shut down" below means every container has terminated too.
	for _, name := range []string{"period-120", "period-5"} {
		pod := p.waitPod(t, ns, name, 30*time.Second-time.Since(start), "shut down", isShutDown)
		checkShutdownTerminated(t, pod)
	}
	for _, name := range []string{"critical-period-120", "critical-period-5"} {
		pod, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cs := containerStatus(pod, "c"); cs == nil || cs.State.Running == nil {
			t.Errorf("critical pod %s must still run once the regular pods are shut down; got\n%s", name, describe(pod))
		}
	}
	for _, name := range []string{"critical-period-120", "critical-period-5"} {
		pod := p.waitPod(t, ns, name, 40*time.Second-time.Since(start), "shut down", isShutDown)
		checkShutdownTerminated(t, pod)
	}
	select {
	case <-lock.Released():
	case <-time.After(40*time.Second - time.Since(start)):
		t.Fatal("the inhibitor lock was not released once the pods had stopped")
	}
	// Every regular pod got SIGTERM before any critical one.
	var regular, critical []float64
	for _, pod := range pods {
		b, err := os.ReadFile(filepath.Join(marks, pod.Name))
		if err != nil {
			t.Fatalf("pod %s never got SIGTERM: %v", pod.Name, err)
		}
		at, _ := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if strings.HasPrefix(pod.Name, "critical") {
			critical = append(critical, at)
		} else {
			regular = append(regular, at)
		}
	}
	sort.Float64s(regular)
	sort.Float64s(critical)
	if regular[1] >= critical[0] {
		t.Errorf("SIGTERM times: regular %v, critical %v; want every regular pod first", regular, critical)
	}
	watch.finish(t)
	t.Logf("all pods stopped %v after PrepareForShutdown(true); SIGTERM at regular %v, critical %v", time.Since(start).Round(time.Millisecond), regular, critical)

	// Metrics and the state file record the shutdown.
	metrics := agentGet(t, p, "/metrics")
	st, ok1 := metricValue(metrics, "kubelet_graceful_shutdown_start_time_seconds")
	en, ok2 := metricValue(metrics, "kubelet_graceful_shutdown_end_time_seconds")
	if !ok1 || !ok2 || st < float64(start.Add(-time.Minute).Unix()) || en < st {
		t.Errorf("metrics: start %v (%v), end %v (%v); want start then end\n%s", st, ok1, en, ok2, metrics)
	}
	var state struct{ StartTime, EndTime time.Time }
	b, err := os.ReadFile(filepath.Join(p.DataDir, "agent", "graceful_node_shutdown_state"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &state); err != nil || state.StartTime.IsZero() || state.EndTime.Before(state.StartTime) {
		t.Errorf("state file %s: %+v %v", b, state, err)
	}

	// Cancelled (upstream's "cancelled shutdown"): Ready again, the lock is
	// taken again, the stopped pods are not brought back, new pods run.
	cancelAt := time.Now()
	if err := logind.PrepareForShutdown(false); err != nil {
		t.Fatal(err)
	}
	waitNodeReadyAgain(t, p, 30*time.Second-time.Since(cancelAt))
	inhibitLock(t, logind, 1, 30*time.Second)
	after := stubbornPod(p, ns, "after-cancel", marks, 120, "")
	after.Spec.NodeName = p.NodeName // the not-ready taint may linger a moment
	p.create(t, after)
	p.waitPod(t, ns, after.Name, 60*time.Second, "Running after the cancel", func(pod *v1.Pod) bool {
		return pod.Status.Phase == v1.PodRunning
	})
	waitArmed(t, marks, after.Name)
	for _, pod := range pods {
		got, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err != nil || got.Status.Phase != v1.PodFailed {
			t.Errorf("pod %s after the cancel: want still Failed (%v)\n%s", pod.Name, err, describe(got))
		}
	}

	// A second shutdown, cancelled while it runs: NotReady, then Ready
	// within 30s of the cancel; the pod being stopped is not brought back.
	if err := logind.PrepareForShutdown(true); err != nil {
		t.Fatal(err)
	}
	waitNodeShuttingDown(t, p, 30*time.Second)
	Eventually(t, 30*time.Second, "SIGTERM to pod after-cancel", func() (bool, error) {
		_, err := os.Stat(filepath.Join(marks, after.Name))
		return err == nil, err
	})
	cancelAt = time.Now()
	if err := logind.PrepareForShutdown(false); err != nil {
		t.Fatal(err)
	}
	waitNodeReadyAgain(t, p, 30*time.Second-time.Since(cancelAt))
	pod := p.waitPod(t, ns, after.Name, 30*time.Second, "shut down, not brought back", isShutDown)
	checkShutdownTerminated(t, pod)
	t.Logf("second shutdown: cancelled; pod %s shut down %v after the cancel", after.Name, time.Since(cancelAt).Round(time.Millisecond))
}

// §10 by pod priority: bands 100000/10000/1000 (PriorityClasses created
// through the API), the default band and the critical one, each of 4s, are
// stopped in order default → 1000 → 10000 → 100000 → critical, each band
// waiting its full period for pods that ignore SIGTERM. Triggered by
// `podvisor node shutdown`: no D-Bus on the machine.
func TestGracefulShutdownByPodPriorityCommand(t *testing.T) {
	t.Parallel()
	const period = 4
	cfg := kubeletConfig(t, fmt.Sprintf(`shutdownGracePeriodByPodPriority:
  - {priority: 100000, shutdownGracePeriodSeconds: %[1]d}
  - {priority: 10000, shutdownGracePeriodSeconds: %[1]d}
  - {priority: 1000, shutdownGracePeriodSeconds: %[1]d}
  - {priority: 0, shutdownGracePeriodSeconds: %[1]d}
  - {priority: 2000000000, shutdownGracePeriodSeconds: %[1]d}
`, period))
	p := NewPodvisor(t, "--config", cfg)
	p.Env = []string{noSystemBus}
	p.Start()
	ns := p.Namespace("priority")
	classes := map[string]int32{"custom-class-a": 100000, "custom-class-b": 10000, "custom-class-c": 1000}
	for name, value := range classes {
		_, err := p.Admin.SchedulingV1().PriorityClasses().Create(context.Background(),
			&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	marks := t.TempDir()
	order := []struct{ pod, class string }{
		{"default", ""}, {"class-c", "custom-class-c"}, {"class-b", "custom-class-b"},
		{"class-a", "custom-class-a"}, {"critical", "system-node-critical"},
	}
	// Created in reverse, so that creation order proves nothing.
	for i := len(order) - 1; i >= 0; i-- {
		p.create(t, stubbornPod(p, ns, order[i].pod, marks, 60, order[i].class))
	}
	for _, o := range order {
		p.waitPod(t, ns, o.pod, 60*time.Second, "Running and Ready", func(pod *v1.Pod) bool {
			return pod.Status.Phase == v1.PodRunning && isReady(pod)
		})
		waitArmed(t, marks, o.pod)
	}
	watch := watchPods(t, p, ns)

	// --wait returns once the last band is done.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "node", "shutdown", "--wait", "--data-dir", p.DataDir)
	// The marks are /proc/uptime readings, the same clock as this one.
	shutdownAt := uptime(t)
	var cmdOut, cmdErr strings.Builder
	cmd.Stdout, cmd.Stderr = &cmdOut, &cmdErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmdDone := make(chan error, 1)
	go func() { cmdDone <- cmd.Wait() }()
	waitNodeShuttingDown(t, p, 30*time.Second)
	start := time.Now()
	for _, o := range order {
		pod := p.waitPod(t, ns, o.pod, 60*time.Second-time.Since(start), "shut down", isShutDown)
		checkShutdownTerminated(t, pod)
	}
	watch.finish(t)
	select {
	case err := <-cmdDone:
		if err != nil || !strings.Contains(cmdOut.String(), "is shutting down") || !strings.Contains(cmdOut.String(), "every pod is stopped") {
			t.Errorf("podvisor node shutdown --wait: %v\nstdout: %s\nstderr: %s", err, cmdOut.String(), cmdErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("podvisor node shutdown --wait still waits 30s after every pod stopped\nstdout: %s", cmdOut.String())
	}
	// Band i starts once the i bands before it have waited their whole
	// period for their stubborn pods, so its mark is written no earlier than
	// period*i after the command. Measured from the command, not from the
	// mark of the band before: a trap runs late under load (after its
	// shell's sleep), and a late mark before a timely one looked like a
	// short band (2.8s of 4 on a loaded CI machine).
	var prev float64
	for i, o := range order {
		b, err := os.ReadFile(filepath.Join(marks, o.pod))
		if err != nil {
			t.Fatalf("pod %s never got SIGTERM: %v", o.pod, err)
		}
		at, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if err != nil {
			t.Fatalf("pod %s's mark: %v", o.pod, err)
		}
		if earliest := shutdownAt + float64(period*i); at < earliest-0.1 {
			t.Errorf("pod %s got SIGTERM %.1fs after the shutdown began, want at least %ds: %d bands of %ds before it (in order: %v)",
				o.pod, at-shutdownAt, period*i, i, period, order)
		}
		if at < prev {
			t.Errorf("pod %s got SIGTERM %.1fs before the band before it (in order: %v)", o.pod, prev-at, order)
		}
		prev = at
	}
	log, _ := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
	if n := strings.Count(string(log), "systemd-logind is not reachable over D-Bus"); n != 1 {
		t.Errorf("podvisor.log names the missing logind %d times, want once", n)
	}

	Eventually(t, 30*time.Second, "podvisor node status to report the end", func() (bool, error) {
		out, errOut, code := runPodvisor(t, 30*time.Second, "node", "status", "--data-dir", p.DataDir)
		if code != 0 {
			return false, fmt.Errorf("exit %d: %s", code, errOut)
		}
		return strings.Contains(out, "shutting down since") && strings.Contains(out, "ended"), fmt.Errorf("stdout: %s", out)
	})
	cancelAt := time.Now()
	out, errOut, code := runPodvisor(t, 30*time.Second, "node", "cancel", "--data-dir", p.DataDir)
	if code != 0 {
		t.Fatalf("podvisor node cancel: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	waitNodeReadyAgain(t, p, 30*time.Second-time.Since(cancelAt))
}

// Without any grace period configured the command says how to enable it.
func TestNodeShutdownCommandNotConfigured(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	out, errOut, code := runPodvisor(t, 30*time.Second, "node", "shutdown", "--data-dir", p.DataDir)
	if code == 0 || !strings.Contains(errOut, "graceful node shutdown is not enabled") || !strings.Contains(errOut, "shutdownGracePeriod") {
		t.Errorf("podvisor node shutdown without configuration: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	c, err := nodeReadyCondition(p, p.NodeName)
	if err != nil || c.Status != v1.ConditionTrue {
		t.Errorf("node not Ready after a refused shutdown: %+v %v", c, err)
	}
}

// uptime reads /proc/uptime, the clock of the shell marks (timestamp).
func uptime(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
