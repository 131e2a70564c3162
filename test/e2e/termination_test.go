package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// hookHandler is a pod that serves the HTTP hooks of other pods, as in
// upstream's lifecycle hook tests: the hooks name its IP as their host, and
// its log shows the requests it got.
type hookHandler struct {
	p        *Podvisor
	ns, name string
	ip       string
	port     int
}

func (p *Podvisor) newHookHandler(t *testing.T, ns string) *hookHandler {
	t.Helper()
	h := &hookHandler{p: p, ns: ns, name: "hook-handler", port: freePort(t)}
	p.create(t, p.pod(ns, h.name, v1.RestartPolicyAlways, p.testserver(t, "c", "serve", "--port", strconv.Itoa(h.port))))
	h.ip = p.waitRunning(t, ns, h.name).Status.PodIP
	p.waitLogs(t, ns, h.name, "c", 30*time.Second, "serving on")
	return h
}

func (h *hookHandler) hook(path string) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Host: h.ip, Path: path, Port: intstr.FromInt32(int32(h.port))}}
}

// seen tells whether the handler has got a request for path.
func (h *hookHandler) seen(t *testing.T, path string) bool {
	t.Helper()
	out, err := h.p.logs(h.ns, h.name, "c")
	if err != nil {
		t.Fatalf("log of the hook handler: %v", err)
	}
	return strings.Contains(out, "request GET "+path+" ")
}

// httpHook is an HTTP hook to the hooked pod itself (its IP), on port.
func httpHook(port int, path string) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}}
}

func execHook(script string) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", script}}}
}

func (p *Podvisor) deletePod(t *testing.T, ns, name string, grace int64) {
	t.Helper()
	if err := p.Admin.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
}

// waitGone waits for the pod object to disappear and returns when it did.
func (p *Podvisor) waitGone(t *testing.T, ns, name string, timeout time.Duration) time.Time {
	t.Helper()
	Eventually(t, timeout, "pod "+ns+"/"+name+" gone", func() (bool, error) {
		_, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	return time.Now()
}

// lastStatus watches a pod until it is deleted and returns the last status
// the agent wrote (the final one, written before the object is deleted).
// checkKilledAt checks that a container was killed want after the delete
// that started at deleted: not before (the semantic), and not so long after
// that the kill never came on time. It reads the runtime's exit time
// (finishedAt), not when the pod left the API, which also includes the
// runtime's teardown: on containerd under a loaded 2-core CI that alone took
// over 4 s. The API keeps whole seconds, so finishedAt is up to 1 s early.
func checkKilledAt(t *testing.T, term *v1.ContainerStateTerminated, deleted time.Time, want time.Duration) {
	t.Helper()
	d := term.FinishedAt.Sub(deleted)
	t.Logf("container killed %v after the delete (finishedAt in whole seconds)", d)
	if d < want-time.Second-100*time.Millisecond || d > want+4*time.Second {
		t.Errorf("container killed %v after the delete, want %v", d, want)
	}
}

func (p *Podvisor) watchFinal(t *testing.T, ns, name string, timeout time.Duration) (func() *v1.Pod, func()) {
	t.Helper()
	w, err := p.Admin.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last *v1.Pod
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*v1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			last = pod
			mu.Unlock()
			if ev.Type == watch.Deleted {
				return
			}
		}
	}()
	get := func() *v1.Pod {
		select {
		case <-done:
		case <-time.After(timeout):
			t.Fatalf("pod %s/%s not deleted within %v", ns, name, timeout)
		}
		mu.Lock()
		defer mu.Unlock()
		return last
	}
	return get, w.Stop
}

func TestLifecycleHooks(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("hooks")
	srv := p.newHookHandler(t, ns)

	t.Run("postStart exec and HTTP hooks run", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		pod := p.pod(ns, "poststart", v1.RestartPolicyAlways, sh("exec", "sleep 3600"), sh("http", "sleep 3600"))
		pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: execHook("echo poststart > '" + dir + "/poststart'")}
		pod.Spec.Containers[1].Lifecycle = &v1.Lifecycle{PostStart: srv.hook("/echo?msg=poststart")}
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "poststart", 2*time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning && isReady(pod) })
		if b, _ := os.ReadFile(dir + "/poststart"); string(b) != "poststart\n" {
			t.Errorf("exec postStart did not run before the container was Running: %q", b)
		}
		if !srv.seen(t, "/echo?msg=poststart") {
			t.Error("HTTP postStart hook not received before the container was Running")
		}
	})

	t.Run("preStop exec and HTTP hooks run on delete", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		pod := p.pod(ns, "prestop", v1.RestartPolicyAlways, sh("exec", "sleep 3600"), sh("http", "sleep 3600"))
		pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: execHook("echo prestop > '" + dir + "/prestop'")}
		pod.Spec.Containers[1].Lifecycle = &v1.Lifecycle{PreStop: srv.hook("/echo?msg=prestop")}
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "prestop", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		p.deletePod(t, ns, "prestop", 15)
		Eventually(t, 30*time.Second, "preStop hooks", func() (bool, error) {
			b, _ := os.ReadFile(dir + "/prestop")
			return string(b) == "prestop\n" && srv.seen(t, "/echo?msg=prestop"), nil
		})
		p.waitGone(t, ns, "prestop", 30*time.Second)
	})

	t.Run("failing postStart kills the container and restarts it", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "poststart-fail", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
		pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"/no/such/hook"}}}}
		p.create(t, pod)
		p.waitPod(t, ns, "poststart-fail", 60*time.Second, "a restart", func(pod *v1.Pod) bool { return restarts(pod) >= 1 })
		p.waitEvent(t, ns, "poststart-fail", "FailedPostStartHook")
	})

	t.Run("failing HTTP preStop does not block deletion", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "prestop-closed", v1.RestartPolicyAlways, sh("c", sleepUntilTERM))
		pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: httpHook(closedPort(t), "/")}
		p.create(t, pod)
		p.waitPod(t, ns, "prestop-closed", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		// Gone long before the 120 s grace: the failed hook did not hold the
		// stop (a deadline, not a timing of the machine).
		p.deletePod(t, ns, "prestop-closed", 120)
		p.waitGone(t, ns, "prestop-closed", 60*time.Second)
		p.waitEvent(t, ns, "prestop-closed", "FailedPreStopHook")
	})
}

func (p *Podvisor) waitEvent(t *testing.T, ns, pod, reason string) {
	t.Helper()
	Eventually(t, 30*time.Second, "event "+reason+" on "+pod, func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == pod && e.Reason == reason {
				return true, nil
			}
		}
		return false, nil
	})
}

func TestSleepHooks(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("sleephooks")
	sleepPod := func(name string, seconds, grace int64) *v1.Pod {
		pod := p.pod(ns, name, v1.RestartPolicyAlways, sh("c", sleepUntilTERM))
		pod.Spec.TerminationGracePeriodSeconds = ptr.To(grace)
		pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: seconds}}}
		return pod
	}
	t.Run("preStop sleep 50 within grace 100", func(t *testing.T) {
		t.Parallel()
		p.create(t, sleepPod("sleep-50", 50, 100))
		p.waitPod(t, ns, "sleep-50", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		deleted := time.Now()
		p.deletePod(t, ns, "sleep-50", 100)
		gone := p.waitGone(t, ns, "sleep-50", 2*time.Minute)
		if d := gone.Sub(deleted); d < 50*time.Second || d > 100*time.Second {
			t.Errorf("pod gone %v after delete, want between 50 and 100 s", d)
		}
	})
	t.Run("preStop sleep 50 cut by a delete with grace 30", func(t *testing.T) {
		t.Parallel()
		p.create(t, sleepPod("sleep-30", 50, 100))
		p.waitPod(t, ns, "sleep-30", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		deleted := time.Now()
		p.deletePod(t, ns, "sleep-30", 30)
		gone := p.waitGone(t, ns, "sleep-30", 2*time.Minute)
		if d := gone.Sub(deleted); d < 30*time.Second || d > 50*time.Second {
			t.Errorf("pod gone %v after delete, want between 30 and 50 s", d)
		}
	})
	t.Run("sleep on an exited container adds nothing", func(t *testing.T) {
		t.Parallel()
		pod := sleepPod("sleep-exited", 50, 100)
		pod.Spec.RestartPolicy = v1.RestartPolicyNever
		pod.Spec.Containers[0].Command = []string{"true"}
		p.create(t, pod)
		p.waitPod(t, ns, "sleep-exited", time.Minute, "Succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
		deleted := time.Now()
		p.deletePod(t, ns, "sleep-exited", 100)
		gone := p.waitGone(t, ns, "sleep-exited", time.Minute)
		if d := gone.Sub(deleted); d > 10*time.Second {
			t.Errorf("pod gone %v after delete: the preStop sleep ran on an exited container", d)
		}
	})
}

func TestGracefulTermination(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("termination")

	t.Run("SIGTERM-ignoring container is killed at the grace period", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		pod := p.pod(ns, "stubborn", v1.RestartPolicyAlways, sh("c", armedTrap(dir, "c", "", "while true; do sleep 0.2; done")))
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "stubborn", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		waitArmed(t, dir, "c")
		final, stop := p.watchFinal(t, ns, "stubborn", time.Minute)
		defer stop()
		deleted := time.Now()
		p.deletePod(t, ns, "stubborn", 5)
		last := final()
		term := containerStatus(last, "c").State.Terminated
		if term == nil || term.ExitCode != 137 {
			t.Fatalf("final status: %s", describe(last))
		}
		checkKilledAt(t, term, deleted, 5*time.Second)
		if last.Status.Phase != v1.PodFailed {
			t.Errorf("phase = %s, want Failed (killed, exit 137)", last.Status.Phase)
		}
		p.waitEvent(t, ns, "stubborn", "Killing")
	})

	t.Run("a hanging preStop is cut at grace + 2 s", func(t *testing.T) {
		t.Parallel()
		// The container ignores SIGTERM, so only SIGKILL at grace + 2 s ends it.
		dir := t.TempDir()
		pod := p.pod(ns, "hangs", v1.RestartPolicyAlways, sh("c", armedTrap(dir, "c", "", "while true; do sleep 0.2; done")))
		pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: execHook("sleep 3600")}
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "hangs", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		waitArmed(t, dir, "c")
		final, stop := p.watchFinal(t, ns, "hangs", time.Minute)
		defer stop()
		deleted := time.Now()
		p.deletePod(t, ns, "hangs", 5)
		last := final()
		term := containerStatus(last, "c").State.Terminated
		if term == nil || term.ExitCode != 137 {
			t.Fatalf("final status: %s", describe(last))
		}
		checkKilledAt(t, term, deleted, 7*time.Second)
	})

	t.Run("force delete removes the object at once and the processes with the minimum grace", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		c := sh("c", startOrphan(dir)+"; trap '' TERM; while true; do sleep 0.2; done")
		tag := tagProcesses(&c)
		pod := p.pod(ns, "forced", v1.RestartPolicyAlways, c)
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](300)
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "forced", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		waitFile(t, filepath.Join(dir, "orphan"))
		if n := len(taggedProcesses(tag)); n < 2 {
			t.Fatalf("%d processes of the container before the delete, want the shell and its orphan at least", n)
		}
		start := time.Now()
		if err := p.Admin.CoreV1().Pods(ns).Delete(context.Background(), "forced", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), "forced", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pod still in the API right after a force delete: %v", err)
		}
		// The 2 s minimum grace applies, not the pod's 300 s: a deadline far
		// below the grace tells them apart without timing the machine (the
		// figure is logged; bench/ measures it).
		Eventually(t, 20*time.Second, "processes gone", func() (bool, error) { return len(taggedProcesses(tag)) == 0, nil })
		t.Logf("processes gone %v after the force delete", time.Since(start).Round(time.Millisecond))
	})

	t.Run("orphans of a container are killed with it", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		c := sh("c", startOrphan(dir)+"; exit 0")
		tag := tagProcesses(&c)
		pod := p.pod(ns, "forker", v1.RestartPolicyNever, c)
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "forker", time.Minute, "Succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
		waitFile(t, filepath.Join(dir, "orphan")) // it was started
		Eventually(t, 5*time.Second, "the orphan gone", func() (bool, error) { return len(taggedProcesses(tag)) == 0, nil })
	})

	t.Run("sidecars stop after the main container, in reverse order", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		file := filepath.Join(dir, "order")
		trapper := func(name string) v1.Container {
			return sh(name, armedTrap(dir, name, "sleep 0.3; echo "+name+" >> \""+file+"\"; exit 0", "while true; do sleep 0.1; done"))
		}
		pod := p.pod(ns, "sidecars", v1.RestartPolicyAlways, trapper("main"))
		for _, n := range []string{"side1", "side2", "side3"} {
			c := trapper(n)
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
		}
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](20)
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "sidecars", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning && isReady(pod) })
		waitArmed(t, dir, "main", "side1", "side2", "side3")
		p.deletePod(t, ns, "sidecars", 20)
		p.waitGone(t, ns, "sidecars", time.Minute)
		if b := readFile(t, file); b != "main\nside3\nside2\nside1\n" {
			t.Errorf("stop order = %q, want main, side3, side2, side1", b)
		}
	})

	t.Run("a second delete with a shorter grace shortens the termination", func(t *testing.T) {
		t.Parallel()
		// The trap must be set before the first delete's SIGTERM: Running can
		// come before the shell runs, and on the process runtime (not PID 1)
		// an early SIGTERM ends it, and the pod, at once.
		dir := t.TempDir()
		pod := p.pod(ns, "shortened", v1.RestartPolicyAlways, sh("c", armedTrap(dir, "c", "", "while true; do sleep 0.2; done")))
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](120)
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "shortened", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
		waitArmed(t, dir, "c")
		p.deletePod(t, ns, "shortened", 100)
		p.waitPod(t, ns, "shortened", 10*time.Second, "Terminating", func(pod *v1.Pod) bool { return pod.DeletionTimestamp != nil })
		time.Sleep(time.Second) // let the agent start the 100 s stop
		final, stop := p.watchFinal(t, ns, "shortened", time.Minute)
		defer stop()
		second := time.Now()
		p.deletePod(t, ns, "shortened", 3)
		last := final()
		term := containerStatus(last, "c").State.Terminated
		if term == nil || term.ExitCode != 137 {
			t.Fatalf("final status: %s", describe(last))
		}
		checkKilledAt(t, term, second, 3*time.Second)
	})
}

// Agent restart during a termination: termination starts again with the full
// grace period, the preStop runs (at least once) and the container stops.
func TestAgentRestartDuringTermination(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ns := p.Namespace("restart-term")
	dir := t.TempDir()
	c := sh("c", "exec sleep 3600")
	tag := tagProcesses(&c)
	pod := p.pod(ns, "slow-stop", v1.RestartPolicyAlways, c)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: execHook("echo prestop >> '" + dir + "/prestop'; sleep 5")}
	shareHostDirs(pod, dir)
	p.create(t, pod)
	p.waitPod(t, ns, "slow-stop", time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	// Running may be reported before runc's init has exec'd the command.
	Eventually(t, 30*time.Second, "a process of the running container", func() (bool, error) {
		return len(taggedProcesses(tag)) > 0, nil
	})
	p.deletePod(t, ns, "slow-stop", 60)
	Eventually(t, 20*time.Second, "preStop started", func() (bool, error) {
		_, err := os.Stat(dir + "/prestop")
		return err == nil, err
	})
	p.Stop()
	p.Start()
	p.waitGone(t, ns, "slow-stop", 90*time.Second)
	if pids := taggedProcesses(tag); len(pids) > 0 {
		t.Errorf("the container survived its termination across an agent restart: processes %v", pids)
	}
	if b := readFile(t, dir+"/prestop"); !strings.HasPrefix(b, "prestop\n") {
		t.Errorf("preStop runs = %q", b)
	}
}
