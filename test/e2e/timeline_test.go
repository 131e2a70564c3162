package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/timeline"
)

// podvisorTimeline runs `podvisor timeline` against p and returns its stdout.
func (p *Podvisor) timeline(t *testing.T, ns, pod string, args ...string) (string, error) {
	t.Helper()
	// Output keeps stderr in the *exec.ExitError it returns.
	out, err := exec.Command(binary, append([]string{"timeline", "--kubeconfig", filepath.Join(p.DataDir, "admin.kubeconfig"), "-n", ns, pod}, args...)...).Output()
	return string(out), err
}

// A pod's timeline, through `podvisor timeline` (the API server's node
// proxy to the agent): an init container, a sidecar, a readiness probe that
// fails then passes, and a graceful delete (a preStop hook, the stop signal,
// a sidecar killed at the end of the grace period), in order and at the
// times the API shows to the second. A finalizer keeps the pod in the API after its
// containers are done; once it is gone, so is its timeline.
func TestTimeline(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("timeline")
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	app := sh("app", "trap 'exit 0' TERM; sleep 2; touch "+ready+"; while true; do sleep 0.2; done")
	app.ReadinessProbe = &v1.Probe{ProbeHandler: execProbe("test", "-f", ready), PeriodSeconds: 1}
	app.Lifecycle = &v1.Lifecycle{PreStop: execHook("sleep 0.3")}
	pod := p.pod(ns, "story", v1.RestartPolicyAlways, app)
	init := sh("init", "sleep 0.5")
	// The sidecar ignores SIGTERM: it is killed when the grace period ends.
	side := sh("side", "trap '' TERM; while true; do sleep 0.2; done")
	side.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	pod.Spec.InitContainers = []v1.Container{init, side}
	pod.Finalizers = []string{"podvisor.test/keep"}
	shareHostDirs(pod, dir)
	p.create(t, pod)
	running := p.waitPod(t, ns, "story", 90*time.Second, "Ready", isReady)
	// The grace leaves the preStop (sleep 0.3) room on a loaded machine,
	// where one exec in the container took over 4 s and a 5 s grace cut it.
	const grace = 15
	p.deletePod(t, ns, "story", grace)
	done := p.waitPod(t, ns, "story", 60*time.Second, "all containers terminated", func(pod *v1.Pod) bool {
		for _, s := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
			if s.State.Terminated == nil && s.Name != "init" {
				return false
			}
		}
		return pod.Status.Phase != v1.PodRunning
	})

	out, err := p.timeline(t, ns, "story", "-o", "json")
	if err != nil {
		t.Fatalf("podvisor timeline: %v %s", err, err.(*exec.ExitError).Stderr)
	}
	var tl timeline.Timeline
	if err := json.Unmarshal([]byte(out), &tl); err != nil {
		t.Fatalf("timeline JSON: %v\n%s", err, out)
	}
	if tl.UID != running.UID {
		t.Errorf("timeline of %s, want the pod's %s", tl.UID, running.UID)
	}
	// find returns the index of the first entry from i on that matches.
	find := func(from int, what string, match func(e timeline.Entry) bool) int {
		t.Helper()
		for i := from; i < len(tl.Entries); i++ {
			if match(tl.Entries[i]) {
				return i
			}
		}
		t.Fatalf("no %s after entry %d in the timeline:\n%s", what, from, out)
		return -1
	}
	state := func(c, s string) func(e timeline.Entry) bool {
		return func(e timeline.Entry) bool {
			return e.Kind == timeline.KindContainer && e.Container == c && e.State == s
		}
	}
	for i := 1; i < len(tl.Entries); i++ {
		if tl.Entries[i].Time.Before(tl.Entries[i-1].Time) {
			t.Errorf("entry %d (%+v) before entry %d", i, tl.Entries[i], i-1)
		}
	}
	initRunning := find(0, "init running", state("init", "running"))
	initDone := find(initRunning, "init completed", func(e timeline.Entry) bool {
		return state("init", "terminated")(e) && e.Reason == "Completed" && e.ExitCode != nil && *e.ExitCode == 0
	})
	sideRunning := find(initDone, "sidecar running", state("side", "running"))
	appRunning := find(sideRunning, "app running", state("app", "running"))
	appReady := find(appRunning, "app ready", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindReady && e.Container == "app" && e.State == "true"
	})
	if d := tl.Entries[appReady].Time.Sub(tl.Entries[appRunning].Time); d < 1500*time.Millisecond {
		t.Errorf("app ready %v after it ran: its probe should fail for 2 s", d)
	}
	// The probe's results: failures (each an Unhealthy event of the app),
	// then a success, with how many failures came before it.
	failing := find(appRunning, "readiness failing", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindProbe && e.Container == "app" && e.State == "Readiness failure"
	})
	find(failing, "an Unhealthy event of the app", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindEvent && e.Container == "app" && e.Reason == "Unhealthy"
	})
	passing := find(failing, "readiness passing", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindProbe && e.Container == "app" && e.State == "Readiness success"
	})
	if msg := tl.Entries[passing].Message; !strings.HasPrefix(msg, "after ") || !strings.HasSuffix(msg, " failure") || msg == "after 0 failure" {
		t.Errorf("readiness success %q, want after N failure", msg)
	}
	deletion := find(appReady, "deletion", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindDeletion && strings.Contains(e.Message, fmt.Sprintf("grace %d s", grace))
	})
	killing := find(deletion, "Killing event", func(e timeline.Entry) bool { return e.Kind == timeline.KindEvent && e.Reason == "Killing" })
	hookStart := find(killing, "preStop started", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindHook && e.Container == "app" && e.State == "PreStop started"
	})
	hookEnd := find(hookStart, "preStop succeeded", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindHook && e.Container == "app" && e.State == "PreStop succeeded"
	})
	if d := tl.Entries[hookEnd].Time.Sub(tl.Entries[hookStart].Time); d < 300*time.Millisecond {
		t.Errorf("the preStop hook (sleep 0.3) took %v", d)
	}
	term := find(hookEnd, "SIGTERM to app", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindSignal && e.Container == "app" && e.State == "SIGTERM"
	})
	appDone := find(term, "app terminated", state("app", "terminated"))
	sideTerm := find(appDone, "SIGTERM to the sidecar", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindSignal && e.Container == "side" && e.State == "SIGTERM"
	})
	sideKill := find(sideTerm, "SIGKILL to the sidecar", func(e timeline.Entry) bool {
		return e.Kind == timeline.KindSignal && e.Container == "side" && e.State == "SIGKILL"
	})
	// Killed when what was left of the grace (never under 2 s) ended.
	if d := tl.Entries[sideKill].Time.Sub(tl.Entries[deletion].Time); d < grace*time.Second-500*time.Millisecond || d > grace*time.Second+4*time.Second {
		t.Errorf("the sidecar was killed %v after the deletion, want about the %d s grace", d, grace)
	}
	find(sideTerm, "sidecar terminated", func(e timeline.Entry) bool {
		return state("side", "terminated")(e) && e.ExitCode != nil && *e.ExitCode == 137
	})

	// The API's times (whole seconds) agree with the timeline's.
	near := func(what string, api metav1.Time, at time.Time) {
		t.Helper()
		if d := at.Sub(api.Time); d < 0 || d > 1500*time.Millisecond {
			t.Errorf("%s: timeline %v, API %v", what, at, api.Time)
		}
	}
	if s := containerStatus(running, "app"); s != nil && s.State.Running != nil {
		near("app started", s.State.Running.StartedAt, tl.Entries[appRunning].Time)
	}
	if s := containerStatus(done, "app"); s != nil && s.State.Terminated != nil {
		near("app finished", s.State.Terminated.FinishedAt, tl.Entries[appDone].Time)
	} else {
		t.Errorf("app not terminated in the API: %s", describe(done))
	}

	table, err := p.timeline(t, ns, "story")
	if err != nil || !strings.HasPrefix(table, "TIME") || !strings.Contains(table, "Killing") {
		t.Errorf("table: %v\n%s", err, table)
	}
	trace, err := p.timeline(t, ns, "story", "-o", "trace")
	var doc struct {
		TraceEvents []json.RawMessage `json:"traceEvents"`
	}
	if err != nil || json.Unmarshal([]byte(trace), &doc) != nil || len(doc.TraceEvents) < len(tl.Entries)/2 {
		t.Errorf("trace: %v\n%s", err, trace)
	}

	// Gone from the API, gone from the node.
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := p.Admin.CoreV1().Pods(ns).Patch(context.Background(), "story", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitGone(t, ns, "story", 30*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		req := p.Admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", running.Spec.NodeName, "proxy", "timeline", ns, "story")
		_, err := req.DoRaw(context.Background())
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the timeline of a pod gone from the API is still served (%v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chromium returns the path of Debian's chromium, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium (Debian: apt-get install chromium; .ci/run installs it)")
	}
	return path
}

// kubectlProxy runs `podvisor kubectl proxy` on a free port until the test
// ends and returns its base URL.
func (p *Podvisor) kubectlProxy(t *testing.T) string {
	t.Helper()
	line, ok := p.backgroundKubectl(t, nil, nil, "Starting to serve on ", "proxy", "--port=0")
	if !ok {
		t.Fatal("kubectl proxy did not start")
	}
	return "http://" + strings.TrimPrefix(line, "Starting to serve on ")
}

// renderedDOM loads url in headless Chromium and returns the DOM once its
// scripts ran (they fetch the timeline).
func renderedDOM(t *testing.T, browser, url string, extra ...string) string {
	t.Helper()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000", "--window-size=1400,420"}, extra...)
	cmd := exec.Command(browser, append(args, "--dump-dom", url)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	return string(out)
}

// The timeline page, through the API server's node proxy (kubectl proxy),
// in a real headless Chromium: one lane per container and one for the pod;
// the node's page lists the pod.
func TestTimelinePage(t *testing.T) {
	t.Parallel()
	processRuntimeOnly(t)
	browser := chromium(t)
	p := Shared(t)
	ns := p.Namespace("timeline-page")
	pod := p.pod(ns, "lanes", v1.RestartPolicyAlways, sh("web", "sleep 3600"), sh("worker", "sleep 3600"))
	pod.Spec.InitContainers = []v1.Container{sh("setup", "true")}
	p.create(t, pod)
	running := p.waitPod(t, ns, "lanes", 60*time.Second, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	base := p.kubectlProxy(t) + "/api/v1/nodes/" + running.Spec.NodeName + "/proxy"

	dom := renderedDOM(t, browser, base+"/timeline-ui/"+ns+"/lanes")
	for _, lane := range []string{"(pod)", "setup", "web", "worker"} {
		if n := strings.Count(dom, `data-container="`+lane+`"`); n != 1 {
			t.Errorf("%d lanes for %s in the page:\n%s", n, lane, dom)
		}
	}
	if !strings.Contains(dom, `class="seg running"`) || !strings.Contains(dom, "entries over") {
		t.Errorf("no running segment or no summary in the page:\n%s", dom)
	}
	node := renderedDOM(t, browser, base+"/timeline-ui/")
	if !strings.Contains(node, ">lanes</a>") {
		t.Errorf("the node's page does not list the pod:\n%s", node)
	}
}

// A timeline survives a restart of podvisor: what was recorded before is
// still there, and the running pod's story goes on in it.
func TestTimelineSurvivesARestart(t *testing.T) {
	t.Parallel()
	processRuntimeOnly(t)
	p := NewPodvisor(t)
	p.Start()
	ns := p.Namespace("timeline-restart")
	pod := p.pod(ns, "lasting", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
	pod.Finalizers = []string{"podvisor.test/keep"} // read the timeline after the delete
	p.create(t, pod)
	p.waitRunning(t, ns, "lasting")
	defer func() {
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		p.Admin.CoreV1().Pods(ns).Patch(context.Background(), "lasting", types.MergePatchType, patch, metav1.PatchOptions{})
	}()
	get := func() timeline.Timeline {
		t.Helper()
		out, err := p.timeline(t, ns, "lasting", "-o", "json")
		if err != nil {
			t.Fatalf("podvisor timeline: %v %s", err, err.(*exec.ExitError).Stderr)
		}
		var tl timeline.Timeline
		if err := json.Unmarshal([]byte(out), &tl); err != nil {
			t.Fatal(err)
		}
		return tl
	}
	var before timeline.Timeline
	waitFor(t, 30*time.Second, "the container running in the timeline", func() bool {
		before = get()
		for _, e := range before.Entries {
			if e.Kind == timeline.KindContainer && e.State == "running" {
				return true
			}
		}
		return false
	})
	p.Stop()
	p.Start()
	p.deletePod(t, ns, "lasting", 1)
	var after timeline.Timeline
	waitFor(t, 60*time.Second, "the deletion in the timeline after the restart", func() bool {
		after = get()
		for _, e := range after.Entries {
			if e.Kind == timeline.KindDeletion {
				return true
			}
		}
		return false
	})
	if len(after.Entries) <= len(before.Entries) {
		t.Fatalf("%d entries after the restart, %d before", len(after.Entries), len(before.Entries))
	}
	for i, e := range before.Entries {
		if a := after.Entries[i]; !a.Time.Equal(e.Time) || a.Kind != e.Kind || a.State != e.State {
			t.Errorf("entry %d was %+v before the restart, %+v after", i, e, a)
		}
	}
}

// waitFor polls cond every 200 ms until it holds, for at most timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
