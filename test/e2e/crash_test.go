package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Issue 18: podvisor up and a joined agent are SIGKILLed at random moments
// while pods churn (long-running, crash-looping, one-shots, failing liveness
// probes, containers ignoring SIGTERM, init containers and sidecars, deletes
// with short and zero graces), and restarted on the same data dir each time.
// A watch of every pod checks the invariants of crashChecker; containers
// hold a lock that a second instance of them cannot take; at the end every
// pod is deleted and nothing may be left.
//
// The short version runs with the suite. The long one (docs/reliability.md):
//
//	PODVISOR_CRASH_KILLS=100 PODVISOR_CRASH_SEED=1 go test ./test/e2e -run TestCrashRestarts -timeout 3h -v
//
// The seed fixes the schedule (pod kinds, churn, kill moments); processes'
// own timing still varies from run to run.
func TestCrashRestarts(t *testing.T) {
	t.Parallel()
	heavy(t)
	kills := envInt(t, "PODVISOR_CRASH_KILLS", 3)
	pods := envInt(t, "PODVISOR_CRASH_PODS", 14)
	seed := uint64(envInt(t, "PODVISOR_CRASH_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("crash test: %d kills, %d pods, seed %d (rerun with PODVISOR_CRASH_SEED=%d)", kills, pods, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 18))

	p := NewPodvisor(t)
	p.Env = []string{noSystemBus}
	p.Start()
	ns := p.Namespace("crash")
	a := p.newAgent(t, "crash-worker-"+strconv.FormatUint(seed, 36), "")
	a.Start()
	lockDir := t.TempDir()

	checker := newCrashChecker(podProcesses)
	// The watch lasts the whole test, so that every pod seen is also seen
	// leaving; the churn stops before the end.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	watchCrashPods(watchCtx, p, ns, checker)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ch := &churn{t: t, p: p, ns: ns, nodes: []string{p.NodeName, a.NodeName}, lockDir: lockDir,
		target: pods, checker: checker, rng: rand.New(rand.NewPCG(rng.Uint64(), 1))}
	for range pods {
		ch.create(ctx)
	}
	churnDone := make(chan struct{})
	go func() { defer close(churnDone); ch.run(ctx) }()

	var readyTimes []time.Duration
	upKills, agentKills := 0, 0
	for i := range kills {
		// Some kills land in the first seconds after a restart, where the
		// re-adoption race lived; others after minutes of churn.
		wait := time.Duration(1000+rng.IntN(14000)) * time.Millisecond
		time.Sleep(wait)
		killUp := rng.IntN(3) == 0
		if i == kills-1 && (upKills == 0 || agentKills == 0) {
			killUp = upKills == 0 // every run kills each at least once
		}
		cmd, exited, start := a.cmd, a.exited, a.Start
		if killUp {
			cmd, exited, start = p.cmd, p.exited, p.Start
			upKills++
		} else {
			agentKills++
		}
		_ = cmd.Process.Kill()
		<-exited
		began := time.Now()
		start()
		ready := time.Since(began)
		readyTimes = append(readyTimes, ready)
		if ready > 60*time.Second {
			t.Errorf("kill %d: ready after %v, want within 60s", i+1, ready)
		}
		if v, _, _ := checker.report(); len(v) > 0 && os.Getenv("PODVISOR_CRASH_KEEP_GOING") == "" {
			// Said now: a later step that times out ends the test before the report.
			t.Logf("stopping after kill %d: violations seen: %v", i+1, v)
			break
		}
	}
	cancel()
	<-churnDone

	// The end: every pod deleted gracefully, then nothing may be left.
	checker.markAllRequested()
	if err := p.Admin.CoreV1().Pods(ns).DeleteCollection(context.Background(),
		metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](2)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if left := waitPodsGone(p, ns, 3*time.Minute); len(left) > 0 {
		// Said in full: the data dirs (and podvisor's logs) go with the test.
		for _, pod := range left {
			t.Logf("left: %s", describeLeftPod(&pod))
		}
		saveCrashLogs(p.DataDir, a.DataDir)
		logPodLines(t, left, p.DataDir, a.DataDir)
		t.Fatalf("%d pods still in the API 3m after a graceful delete of all", len(left))
	}
	// The watch may be in a back-off after the last kill: wait until it has
	// seen every pod it saw leave (a relist reports those deleted meanwhile).
	Eventually(t, 2*time.Minute, "the watch to see every pod leave", func() (bool, error) {
		_, seen, deleted := checker.report()
		return seen == deleted, fmt.Errorf("%d pods seen, %d seen leaving", seen, deleted)
	})

	// A deleted pod's worker removes its instances and directory right after
	// the API let the object go.
	var leaks []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		leaks = leftovers(checker, p.DataDir, a.DataDir)
		if len(leaks) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	saveCrashLogs(p.DataDir, a.DataDir)
	violations, seen, deleted := checker.report()
	dups := duplicates(lockDir)
	for _, out := range []string{p.Stderr(), a.stderr.String()} {
		if strings.Contains(out, "panic") {
			leaks = append(leaks, "podvisor printed a panic")
		}
	}
	sort.Slice(readyTimes, func(i, j int) bool { return readyTimes[i] < readyTimes[j] })
	t.Logf("crash test seed %d: %d kills (%d of podvisor up, %d of the agent), %d pods created, %d seen, %d deleted, %d force-deleted",
		seed, upKills+agentKills, upKills, agentKills, ch.created, seen, deleted, ch.forced)
	if len(readyTimes) > 0 {
		t.Logf("ready after restart: min %v, median %v, max %v", readyTimes[0].Round(time.Millisecond),
			readyTimes[len(readyTimes)/2].Round(time.Millisecond), readyTimes[len(readyTimes)-1].Round(time.Millisecond))
	}
	t.Logf("violations: %d, duplicate instances: %d, leftovers: %d", len(violations), len(dups), len(leaks))
	for _, v := range violations {
		t.Error(v)
	}
	for _, d := range dups {
		t.Error("duplicate instance: " + d)
	}
	for _, l := range leaks {
		t.Error("leftover: " + l)
	}
	if len(leaks) > 0 || len(violations) > 0 {
		logAgentLines(t, checker, p.DataDir, a.DataDir)
	}
}

// watchCrashPods feeds every pod status of ns to the checker until ctx ends;
// the informer re-lists and re-watches across restarts of the API server.
func watchCrashPods(ctx context.Context, p *Podvisor, ns string, checker *crashChecker) {
	factory := informers.NewSharedInformerFactoryWithOptions(p.Admin, 0, informers.WithNamespace(ns))
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { checker.observe(obj.(*v1.Pod)) },
		UpdateFunc: func(_, obj any) { checker.observe(obj.(*v1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				checker.gone(pod)
			}
		},
	})
	factory.Start(ctx.Done())
}

// logAgentLines prints what podvisor logged about the pods that were left
// behind, before the data dirs (and their logs) are removed.
func logAgentLines(t *testing.T, checker *crashChecker, dataDirs ...string) {
	var needles []string
	checker.mu.Lock()
	for uid, pp := range checker.pods {
		if len(podProcesses(uid)) > 0 {
			needles = append(needles, string(uid), pp.name)
		}
	}
	checker.mu.Unlock()
	logLinesNaming(t, needles, dataDirs...)
}

// waitPodsGone waits until ns has no pods and returns those still there at
// the deadline.
func waitPodsGone(p *Podvisor, ns string, timeout time.Duration) []v1.Pod {
	deadline := time.Now().Add(timeout)
	for {
		list, err := p.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) && err == nil {
			return list.Items
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// describeLeftPod says where a pod that never went stands: its node, phase,
// deletion and each container's state.
func describeLeftPod(pod *v1.Pod) string {
	s := fmt.Sprintf("%s uid %s node %s phase %s deletion %v grace %v finalizers %v",
		pod.Name, pod.UID, pod.Spec.NodeName, pod.Status.Phase, pod.DeletionTimestamp,
		ptr.Deref(pod.DeletionGracePeriodSeconds, -1), pod.Finalizers)
	all := append(append([]v1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, c := range all {
		switch st := c.State; {
		case st.Running != nil:
			s += fmt.Sprintf("; %s running since %v", c.Name, st.Running.StartedAt)
		case st.Terminated != nil:
			s += fmt.Sprintf("; %s terminated %d %s", c.Name, st.Terminated.ExitCode, st.Terminated.Reason)
		case st.Waiting != nil:
			s += fmt.Sprintf("; %s waiting %s", c.Name, st.Waiting.Reason)
		}
	}
	return s
}

// logPodLines prints podvisor's log lines naming any of pods.
func logPodLines(t *testing.T, pods []v1.Pod, dataDirs ...string) {
	var needles []string
	for _, pod := range pods {
		needles = append(needles, string(pod.UID), pod.Name)
	}
	logLinesNaming(t, needles, dataDirs...)
}

// logLinesNaming prints the lines of each data dir's podvisor.log that
// contain any of needles.
func logLinesNaming(t *testing.T, needles []string, dataDirs ...string) {
	for _, d := range dataDirs {
		b, _ := os.ReadFile(filepath.Join(d, "podvisor.log"))
		for _, line := range strings.Split(string(b), "\n") {
			for _, n := range needles {
				if strings.Contains(line, n) {
					t.Log(filepath.Base(d) + ": " + line)
					break
				}
			}
		}
	}
}

// saveCrashLogs copies podvisor's logs to $PODVISOR_CRASH_SAVE_LOGS, if set.
func saveCrashLogs(dataDirs ...string) {
	if dir := os.Getenv("PODVISOR_CRASH_SAVE_LOGS"); dir != "" {
		for i, d := range dataDirs {
			b, _ := os.ReadFile(filepath.Join(d, "podvisor.log"))
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("podvisor-%d.log", i)), b, 0o644)
		}
	}
}
