package e2e

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The upstream "Container Runtime blackbox test": exit 1, then 0, then run.
func TestBlackboxRestartPolicies(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("blackbox")
	cases := []struct {
		policy   v1.RestartPolicy
		restarts int32
		phase    v1.PodPhase
		ready    bool
	}{
		{v1.RestartPolicyAlways, 2, v1.PodRunning, true},
		{v1.RestartPolicyOnFailure, 1, v1.PodSucceeded, false},
		{v1.RestartPolicyNever, 0, v1.PodFailed, false},
	}
	for _, tc := range cases {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			name := "terminate-cmd-" + strings.ToLower(string(tc.policy))
			dir := t.TempDir()
			counter := p.pod(ns, name, tc.policy, sh("c", counterScript(filepath.Join(dir, "count"))))
			shareHostDirs(counter, dir)
			p.create(t, counter)
			pod := p.waitPod(t, ns, name, 90*time.Second, "restartCount and phase", func(pod *v1.Pod) bool {
				cs := containerStatus(pod, "c")
				return cs != nil && cs.RestartCount == tc.restarts && pod.Status.Phase == tc.phase && isReady(pod) == tc.ready
			})
			// Stable: the counts must not move on (no extra restart).
			time.Sleep(2 * time.Second)
			pod = p.waitPod(t, ns, name, time.Second, "still the same", func(pod *v1.Pod) bool {
				cs := containerStatus(pod, "c")
				return cs.RestartCount == tc.restarts && pod.Status.Phase == tc.phase
			})
			cs := containerStatus(pod, "c")
			if tc.policy == v1.RestartPolicyAlways && cs.State.Running == nil {
				t.Errorf("Always: container not running: %s", describe(pod))
			}
			if tc.policy == v1.RestartPolicyNever && (cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 1 || cs.State.Terminated.Reason != "Error") {
				t.Errorf("Never: want terminated Error exit 1: %s", describe(pod))
			}
			if tc.policy == v1.RestartPolicyOnFailure && (cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed") {
				t.Errorf("OnFailure: want terminated Completed: %s", describe(pod))
			}
		})
	}
}

func TestInitContainers(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("init")
	t.Run("failing init with Never fails the pod", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "init-never", v1.RestartPolicyNever, sh("run1", "sleep 3600"))
		pod.Spec.InitContainers = []v1.Container{sh("init1", "true"), sh("init2", "false")}
		p.create(t, pod)
		got := p.waitPod(t, ns, "init-never", 60*time.Second, "Failed", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodFailed })
		c := condition(got, v1.PodInitialized)
		if c == nil || c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" || c.Message != "containers with incomplete status: [init2]" {
			t.Errorf("Initialized = %+v, want False ContainersNotInitialized [init2]", c)
		}
		if cs := containerStatus(got, "run1"); cs == nil || cs.State.Running != nil || cs.RestartCount != 0 {
			t.Errorf("app container must never have run: %s", describe(got))
		}
	})
	t.Run("failing init with Always keeps restarting", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "init-always", v1.RestartPolicyAlways, sh("run1", "sleep 3600"))
		pod.Spec.InitContainers = []v1.Container{sh("init1", "false"), sh("init2", "true")}
		p.create(t, pod)
		got := p.waitPod(t, ns, "init-always", 90*time.Second, "init1 restartCount >= 3", func(pod *v1.Pod) bool {
			cs := containerStatus(pod, "init1")
			return cs != nil && cs.RestartCount >= 3
		})
		if got.Status.Phase != v1.PodPending {
			t.Errorf("phase = %s, want Pending", got.Status.Phase)
		}
		if cs := containerStatus(got, "run1"); cs == nil || cs.State.Waiting == nil || cs.State.Waiting.Reason != "PodInitializing" {
			t.Errorf("app container should be waiting PodInitializing: %s", describe(got))
		}
	})
	t.Run("init containers run in order before the app", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		file := filepath.Join(dir, "order")
		pod := p.pod(ns, "init-order", v1.RestartPolicyNever, sh("app", "echo app >> "+file))
		pod.Spec.InitContainers = []v1.Container{sh("init1", "echo init1 >> "+file), sh("init2", "echo init2 >> "+file)}
		shareHostDirs(pod, dir)
		p.create(t, pod)
		p.waitPod(t, ns, "init-order", 60*time.Second, "Succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
		if b := readFile(t, file); b != "init1\ninit2\napp\n" {
			t.Errorf("order = %q", b)
		}
	})
}

// A sidecar does not keep a Never pod from completing; it is stopped after
// the main container.
func TestSidecarDoesNotBlockCompletion(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("sidecar")
	dir := t.TempDir()
	file := filepath.Join(dir, "events")
	pod := p.pod(ns, "sidecar", v1.RestartPolicyNever, sh("main", "sleep 2; echo main-done >> "+file))
	side := sh("side", "trap 'echo side-stopped >> "+file+"; exit 0' TERM; echo side-started >> "+file+"; while true; do sleep 0.2; done")
	side.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	pod.Spec.InitContainers = []v1.Container{side}
	shareHostDirs(pod, dir)
	p.create(t, pod)
	got := p.waitPod(t, ns, "sidecar", 60*time.Second, "Succeeded with the sidecar stopped", func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "side")
		return pod.Status.Phase == v1.PodSucceeded && cs != nil && cs.State.Terminated != nil
	})
	if b := readFile(t, file); b != "side-started\nmain-done\nside-stopped\n" {
		t.Errorf("events = %q, want sidecar started, main done, sidecar stopped", b)
	}
	if c := condition(got, v1.PodReady); c == nil || c.Status != v1.ConditionFalse {
		t.Errorf("Ready = %+v after completion", c)
	}
}

func TestReadinessGates(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("gates")
	pod := p.pod(ns, "gated", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/feature-1"}}
	p.create(t, pod)
	got := p.waitPod(t, ns, "gated", 60*time.Second, "ContainersReady", func(pod *v1.Pod) bool {
		c := condition(pod, v1.ContainersReady)
		return c != nil && c.Status == v1.ConditionTrue
	})
	ready := condition(got, v1.PodReady)
	if ready == nil || ready.Status != v1.ConditionFalse || ready.Reason != "ReadinessGatesNotReady" ||
		ready.Message != `corresponding condition of pod readiness gate "example.com/feature-1" does not exist.` {
		t.Fatalf("Ready before the gate = %+v", ready)
	}
	patch := `{"status":{"conditions":[{"type":"example.com/feature-1","status":"True","lastTransitionTime":"` +
		time.Now().UTC().Format(time.RFC3339) + `"}]}}`
	if _, err := p.Admin.CoreV1().Pods(ns).Patch(context.Background(), "gated", types.StrategicMergePatchType,
		[]byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	got = p.waitPod(t, ns, "gated", 30*time.Second, "Ready after the gate", isReady)
	if c := condition(got, "example.com/feature-1"); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("the gate condition was dropped: %s", describe(got))
	}
}

// Back-off between restarts: 0, 10, 20, 40 s. The container records each
// start in a host file (seconds since boot, to the hundredth) and exits at once, so
// start-to-start is the delay measured from the previous finishedAt. A
// restart is never more than 1 s early; it may be late by the time a loaded
// machine takes to notice the exit and start again, but by less than half a
// step (under 5 s for the first), so a wrong schedule — no doubling, a step
// skipped — still fails. (±1 s failed CI at 21.2 s for 20 s on a run with
// load.)
func TestCrashLoopBackOffSchedule(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("backoff")
	dir := t.TempDir()
	file := filepath.Join(dir, "starts")
	crasher := p.pod(ns, "crasher", v1.RestartPolicyAlways, sh("c", timestamp+" >> "+file+"; exit 1"))
	shareHostDirs(crasher, dir)
	p.create(t, crasher)
	var starts []float64
	sawBackOff := false
	deadline := time.Now().Add(150 * time.Second)
	for time.Now().Before(deadline) && len(starts) < 5 {
		pod, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), "crasher", metav1.GetOptions{})
		if err == nil {
			if cs := containerStatus(pod, "c"); cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
				sawBackOff = true
				if w := cs.State.Waiting; !strings.HasPrefix(w.Message, "back-off ") || !strings.Contains(w.Message, "restarting failed container=c pod=crasher_backoff(") {
					t.Errorf("CrashLoopBackOff message = %q", w.Message)
				}
			}
		}
		starts = nil
		if b, err := osReadFile(file); err == nil {
			for _, f := range strings.Fields(string(b)) {
				v, _ := strconv.ParseFloat(f, 64)
				starts = append(starts, v)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !sawBackOff {
		t.Error("never saw waiting CrashLoopBackOff")
	}
	if len(starts) < 5 {
		t.Fatalf("saw %d starts in 150s, want 5: %v", len(starts), starts)
	}
	want := []float64{0, 10, 20, 40}
	for i, w := range want {
		gap := starts[i+1] - starts[i]
		late := max(w/2, 5)
		if gap < w-1 || gap >= w+late {
			t.Errorf("delay before restart %d = %.2fs, want %.0fs (at most 1 s early, under %.0f s late)", i+1, gap, w, late)
		}
	}
}

func TestBadContainers(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("bad")
	t.Run("command that does not exist", func(t *testing.T) {
		t.Parallel()
		c := v1.Container{Name: "c", Image: "none", Command: []string{"/no/such/binary"}}
		p.create(t, p.pod(ns, "nocmd", v1.RestartPolicyNever, c))
		got := p.waitPod(t, ns, "nocmd", 30*time.Second, "Failed", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodFailed })
		term := containerStatus(got, "c").State.Terminated
		if term == nil || term.Reason != "StartError" || term.ExitCode != 128 || !strings.Contains(term.Message, "/no/such/binary") {
			t.Errorf("want terminated StartError 128 naming the binary: %s", describe(got))
		}
	})
	t.Run("missing command", func(t *testing.T) {
		t.Parallel()
		if p.Runtime == "containerd" {
			t.Skip("on containerd a container without a command runs its image's")
		}
		p.create(t, p.pod(ns, "nocommand", v1.RestartPolicyAlways, v1.Container{Name: "c", Image: "busybox"}))
		got := p.waitPod(t, ns, "nocommand", 30*time.Second, "CreateContainerConfigError", func(pod *v1.Pod) bool {
			cs := containerStatus(pod, "c")
			return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError"
		})
		if msg := containerStatus(got, "c").State.Waiting.Message; !strings.Contains(msg, "command") {
			t.Errorf("message %q should say a command is needed", msg)
		}
		if got.Status.Phase != v1.PodPending {
			t.Errorf("phase = %s, want Pending", got.Status.Phase)
		}
	})
	t.Run("active deadline", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "deadline", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
		pod.Spec.ActiveDeadlineSeconds = ptr.To[int64](3)
		p.create(t, pod)
		got := p.waitPod(t, ns, "deadline", 30*time.Second, "DeadlineExceeded", func(pod *v1.Pod) bool {
			return pod.Status.Phase == v1.PodFailed && pod.Status.Reason == "DeadlineExceeded"
		})
		if got.Status.Message != "Pod was active on the node longer than the specified deadline" {
			t.Errorf("message = %q", got.Status.Message)
		}
	})
	t.Run("requests beyond allocatable", func(t *testing.T) {
		t.Parallel()
		pod := p.pod(ns, "huge", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
		pod.Spec.NodeName = p.NodeName // bypass the scheduler, as a static assignment does
		pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resourceMust("1000")}
		p.create(t, pod)
		got := p.waitPod(t, ns, "huge", 30*time.Second, "OutOfcpu", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodFailed })
		if got.Status.Reason != "OutOfcpu" || !strings.HasPrefix(got.Status.Message, "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000") {
			t.Errorf("reason/message = %q / %q", got.Status.Reason, got.Status.Message)
		}
	})
}

// kubectl logs through the embedded kubectl: API server → agent API → log file.
// stdout and stderr are separate pipes, so their order is only certain when
// the writes are apart in time.
func TestKubectlLogs(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("logs")
	p.create(t, p.pod(ns, "talker", v1.RestartPolicyAlways, sh("c", "echo first-line; sleep 0.5; echo to-stderr >&2; exec sleep 3600")))
	p.waitPod(t, ns, "talker", 30*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	kc := filepath.Join(p.DataDir, "admin.kubeconfig")
	var out string
	Eventually(t, 20*time.Second, "kubectl logs", func() (bool, error) {
		o, e, code := runPodvisor(t, 30*time.Second, "kubectl", "--kubeconfig", kc, "-n", ns, "logs", "talker")
		out = o
		if code != 0 {
			return false, errString(e)
		}
		return strings.Contains(o, "first-line") && strings.Contains(o, "to-stderr"), nil
	})
	o, e, code := runPodvisor(t, 30*time.Second, "kubectl", "--kubeconfig", kc, "-n", ns, "logs", "talker", "--timestamps", "--tail=1", "-c", "c")
	if code != 0 || strings.Count(o, "\n") != 1 || !strings.Contains(o, "to-stderr") || !strings.Contains(o, "Z ") {
		t.Errorf("logs --timestamps --tail=1: %q %q (all: %q)", o, e, out)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := osReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kubectl logs --previous shows the instance before the current one, and -f
// follows the current one until it exits.
func TestKubectlLogsPreviousAndFollow(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("logs-previous")
	dir := t.TempDir()
	file := filepath.Join(dir, "runs")
	// Run 1 prints run-1 and exits 1; run 2 prints run-2, then three ticks and exits 0.
	script := "echo x >> '" + file + "'; n=$(wc -l < '" + file + "'); echo run-$n; " +
		"if [ $n -eq 1 ]; then exit 1; fi; for i in 1 2 3; do sleep 1; echo tick-$i; done"
	twice := p.pod(ns, "twice", v1.RestartPolicyOnFailure, sh("c", script))
	shareHostDirs(twice, dir)
	p.create(t, twice)
	p.waitPod(t, ns, "twice", 60*time.Second, "the second run", func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "c")
		return cs != nil && cs.RestartCount == 1 && cs.State.Running != nil
	})
	kc := filepath.Join(p.DataDir, "admin.kubeconfig")
	o, e, code := runPodvisor(t, 30*time.Second, "kubectl", "--kubeconfig", kc, "-n", ns, "logs", "twice", "--previous")
	if code != 0 || o != "run-1\n" {
		t.Errorf("logs --previous = %q (stderr %q)", o, e)
	}
	// -f returns when the container exits, with everything it wrote.
	o, e, code = runPodvisor(t, 30*time.Second, "kubectl", "--kubeconfig", kc, "-n", ns, "logs", "-f", "twice")
	if code != 0 || o != "run-2\ntick-1\ntick-2\ntick-3\n" {
		t.Errorf("logs -f = %q (stderr %q)", o, e)
	}
}
