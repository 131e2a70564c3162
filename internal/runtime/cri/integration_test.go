package cri

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// These tests run a private containerd (containerd_test.go) and prove the
// runtime's contract against it. They skip when not root or when runc or
// the CNI plugins are not installed.

func newRuntime(t *testing.T, c *testContainerd, stateDir string) *Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := New(ctx, Config{Endpoint: c.endpoint, StateDir: stateDir, HostIPs: []string{"192.0.2.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type testPod struct {
	spec runtime.SandboxSpec
	id   string
}

func runPod(t *testing.T, r *Runtime, hostNetwork bool) testPod {
	t.Helper()
	ctx := testCtx(t)
	uid := fmt.Sprintf("uid-%d", time.Now().UnixNano())
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(name) > 50 {
		name = name[:50]
	}
	spec := runtime.SandboxSpec{
		PodUID: uid, PodNamespace: "test", PodName: name, Hostname: "web", HostNetwork: hostNetwork,
		LogDir: filepath.Join(t.TempDir(), "pods", "test_"+name+"_"+uid),
		Labels: map[string]string{"app": "test"},
	}
	id, err := r.RunSandbox(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r.StopSandbox(ctx, id)
		r.RemoveSandbox(ctx, id)
	})
	return testPod{spec: spec, id: id}
}

// podFixture is a runtime on the shared containerd with one running pod
// on the pod network.
func podFixture(t *testing.T) (*Runtime, context.Context, testPod) {
	t.Helper()
	r := newRuntime(t, needContainerd(t), t.TempDir())
	return r, testCtx(t), runPod(t, r, false)
}

func (p testPod) container(name string, cmd ...string) runtime.ContainerSpec {
	return runtime.ContainerSpec{
		PodUID: p.spec.PodUID, PodNamespace: p.spec.PodNamespace, PodName: p.spec.PodName,
		Name: name, SandboxID: p.id, Image: busyboxImage, Command: cmd,
		LogPath:                filepath.Join(p.spec.LogDir, name, "0.log"),
		TerminationMessagePath: "/dev/termination-log",
	}
}

func createStart(t *testing.T, r *Runtime, spec runtime.ContainerSpec) string {
	t.Helper()
	ctx := testCtx(t)
	id, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitExits receives r's events until each of ids has exited, in any order.
func waitExits(t *testing.T, r *Runtime, within time.Duration, ids ...string) {
	t.Helper()
	left := map[string]bool{}
	for _, id := range ids {
		left[id] = true
	}
	timeout := time.After(within)
	for len(left) > 0 {
		select {
		case ev := <-r.Events():
			if ev.State == runtime.StateExited {
				delete(left, ev.ID)
			}
		case <-timeout:
			t.Fatalf("no exit event for %v within %v", left, within)
		}
	}
}

// waitEvent receives r's events until id reaches state.
func waitEvent(t *testing.T, r *Runtime, id string, state runtime.State, within time.Duration) runtime.Event {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case ev := <-r.Events():
			if ev.ID == id && ev.State >= state {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event for %s within %v", state, id, within)
		}
	}
}

func TestSandboxHasAPodIPReachableFromTheHost(t *testing.T) {
	r, ctx, pod := podFixture(t)

	st, err := r.SandboxStatus(ctx, pod.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.SandboxReady || st.HostNetwork || len(st.IPs) == 0 {
		t.Fatalf("sandbox %+v: want ready, own network, an IP", st)
	}
	ip, err := netip.ParseAddr(st.IPs[0])
	if err != nil || !shared.podCIDR.Contains(ip) {
		t.Fatalf("pod IP %s is not in the pod CIDR %s", st.IPs[0], shared.podCIDR)
	}
	if st.PodUID != pod.spec.PodUID || st.PodName != pod.spec.PodName || st.Labels["app"] != "test" {
		t.Errorf("sandbox identity %+v", st)
	}

	createStart(t, r, pod.container("web", "sh", "-c", "echo hello from $(hostname) > /tmp/index.html; exec httpd -f -p 8080 -h /tmp"))
	url := "http://" + netip.AddrPortFrom(ip, 8080).String() + "/index.html"
	var body []byte
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			links, _ := exec.Command("ip", "-br", "addr").CombinedOutput()
			neigh, _ := exec.Command("ip", "neigh").CombinedOutput()
			t.Fatalf("pod IP not reachable from the host: %v\nlinks:\n%s\nneighbours:\n%s", err, links, neigh)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := strings.TrimSpace(string(body)); got != "hello from web" {
		t.Errorf("served %q, want the pod's hostname", got)
	}

	list, err := r.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range list {
		if s.ID == pod.id {
			found = true
			if !slicesEqual(s.IPs, st.IPs) {
				t.Errorf("listed IPs %v, status %v", s.IPs, st.IPs)
			}
		}
	}
	if !found {
		t.Errorf("sandbox %s not listed", pod.id)
	}
}

func TestHostNetworkSandboxHasTheNodesIPs(t *testing.T) {
	c := needContainerd(t)
	r := newRuntime(t, c, t.TempDir())
	pod := runPod(t, r, true)
	st, err := r.SandboxStatus(testCtx(t), pod.id)
	if err != nil {
		t.Fatal(err)
	}
	if !st.HostNetwork || !slicesEqual(st.IPs, []string{"192.0.2.1"}) {
		t.Errorf("sandbox %+v: want the host network and the node's IPs", st)
	}
}

func TestStopAndRemoveSandbox(t *testing.T) {
	r, ctx, pod := podFixture(t)
	id := createStart(t, r, pod.container("app", "sleep", "1000"))
	if err := r.StopSandbox(ctx, pod.id); err != nil {
		t.Fatal(err)
	}
	st, err := r.SandboxStatus(ctx, pod.id)
	if err != nil || st.State != runtime.SandboxNotReady {
		t.Fatalf("stopped sandbox: %+v, %v", st, err)
	}
	if cs, err := r.Status(ctx, id); err != nil || cs.State != runtime.StateExited {
		t.Fatalf("container of a stopped sandbox: %+v, %v", cs, err)
	}
	if err := r.RemoveSandbox(ctx, pod.id); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SandboxStatus(ctx, pod.id); !runtime.IsNotFound(err) {
		t.Errorf("removed sandbox: err %v, want ErrNotFound", err)
	}
	if _, err := r.Status(ctx, id); !runtime.IsNotFound(err) {
		t.Errorf("container of a removed sandbox: err %v, want ErrNotFound", err)
	}
	if err := r.RemoveSandbox(ctx, pod.id); !runtime.IsNotFound(err) {
		t.Errorf("removing it again: err %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(r.terminationDir(pod.id)); !os.IsNotExist(err) {
		t.Errorf("termination files left: %v", err)
	}
}

var crilogLine = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) (stdout|stderr) F (.*)$`)

func TestContainerExitCodeLogAndTerminationMessage(t *testing.T) {
	r, ctx, pod := podFixture(t)
	spec := pod.container("app", "sh", "-c", "echo out; echo err >&2; printf bye > /dev/termination-log; exit 3")
	spec.Env = []string{"GREETING=hi"}
	id := createStart(t, r, spec)
	waitEvent(t, r, id, runtime.StateExited, 10*time.Second)

	st, err := r.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateExited || st.ExitCode != 3 || st.Reason != "" || st.StartedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
		t.Errorf("status %+v: want exited 3, no reason, times", st)
	}
	if st.PodUID != spec.PodUID || st.Name != "app" || st.SandboxID != pod.id || st.LogPath != spec.LogPath {
		t.Errorf("identity %+v", st)
	}
	if b, err := os.ReadFile(st.TerminationMessageFile); err != nil || string(b) != "bye" {
		t.Errorf("termination message %q, %v", b, err)
	}
	b, err := os.ReadFile(spec.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	streams := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		m := crilogLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("log line %q is not in the CRI format", line)
		}
		streams[m[3]] += m[4]
	}
	if streams["stdout"] != "out" || streams["stderr"] != "err" {
		t.Errorf("log %q", b)
	}
}

func TestStartErrorForAMissingCommand(t *testing.T) {
	r, ctx, pod := podFixture(t)
	id, err := r.Create(ctx, pod.container("app", "/no/such/command"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v; a command that cannot run is not an error", err)
	}
	st, err := r.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateExited || st.Reason != "StartError" || st.ExitCode != 128 || !strings.Contains(st.Message, "/no/such/command") {
		t.Errorf("status %+v: want exited, StartError, 128, the runtime's message", st)
	}
	t.Logf("the runtime's message: %s", st.Message)
	waitEvent(t, r, id, runtime.StateExited, 5*time.Second)
}

func TestStopHonoursGraceThenKills(t *testing.T) {
	r, ctx, pod := podFixture(t)
	polite := createStart(t, r, pod.container("polite", "sh", "-c", `trap "exit 0" TERM; while true; do sleep 1; done`))
	stubborn := createStart(t, r, pod.container("stubborn", "sh", "-c", `trap "" TERM; while true; do sleep 1; done`))
	time.Sleep(300 * time.Millisecond) // the traps are set

	start := time.Now()
	if err := r.Stop(ctx, polite, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a container that exits on SIGTERM took %v to stop", d)
	}
	if st, _ := r.Status(ctx, polite); st.State != runtime.StateExited || st.ExitCode != 0 {
		t.Errorf("polite: %+v, want exited 0 (its TERM handler)", st)
	}

	start = time.Now()
	if err := r.Stop(ctx, stubborn, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 2*time.Second || d > 8*time.Second {
		t.Errorf("a container ignoring SIGTERM stopped after %v, want the 2s grace, then SIGKILL", d)
	}
	if st, _ := r.Status(ctx, stubborn); st.State != runtime.StateExited || st.ExitCode != 137 {
		t.Errorf("stubborn: %+v, want exited 137 (SIGKILL)", st)
	}
}

func TestStopSendsTheSpecsStopSignal(t *testing.T) {
	r, ctx, pod := podFixture(t)
	spec := pod.container("app", "sh", "-c", `trap "echo got USR1; exit 7" USR1; trap "exit 1" TERM; while true; do sleep 1; done`)
	spec.StopSignal = syscall.SIGUSR1
	id := createStart(t, r, spec)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := r.Stop(ctx, id, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stop took %v", d)
	}
	if st, _ := r.Status(ctx, id); st.ExitCode != 7 {
		t.Errorf("exit %d, want 7: the container did not get SIGUSR1 (%+v)", st.ExitCode, st)
	}
	if b, _ := os.ReadFile(spec.LogPath); !bytes.Contains(b, []byte("got USR1")) {
		t.Errorf("log %q", b)
	}
}

func TestExec(t *testing.T) {
	r, ctx, pod := podFixture(t)
	spec := pod.container("app", "sleep", "1000")
	spec.Env = []string{"GREETING=hi"}
	id := createStart(t, r, spec)
	if err := r.Start(ctx, id); !runtime.IsConflict(err) {
		t.Errorf("starting a running container: %v, want ErrConflict", err)
	}

	var out, errOut bytes.Buffer
	code, err := r.Exec(ctx, id, []string{"sh", "-c", "echo $GREETING; echo err >&2; exit 5"}, &out, &errOut, 10*time.Second)
	if err != nil || code != 5 || out.String() != "hi\n" || errOut.String() != "err\n" {
		t.Errorf("exec: code %d err %v stdout %q stderr %q; want 5, the container's env", code, err, out.String(), errOut.String())
	}
	if code, err := r.Exec(ctx, id, []string{"true"}, io.Discard, io.Discard, 0); code != 0 || err != nil {
		t.Errorf("exec true: %d %v", code, err)
	}

	start := time.Now()
	code, err = r.Exec(ctx, id, []string{"sleep", "30"}, io.Discard, io.Discard, time.Second)
	if !runtime.IsTimeout(err) || code != -1 {
		t.Errorf("exec past its timeout: code %d err %v, want -1 and ErrTimeout", code, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("exec with a 1s timeout returned after %v", d)
	}

	if _, err := r.Exec(ctx, "nosuchcontainer", []string{"true"}, io.Discard, io.Discard, time.Second); !runtime.IsNotFound(err) {
		t.Errorf("exec in an unknown container: %v, want ErrNotFound", err)
	}
	if err := r.Stop(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Exec(ctx, id, []string{"true"}, io.Discard, io.Discard, time.Second); !runtime.IsConflict(err) {
		t.Errorf("exec in an exited container: %v, want ErrConflict", err)
	}
}

func TestOOMKilledWithAMemoryLimit(t *testing.T) {
	r, ctx, pod := podFixture(t)
	spec := pod.container("hog", "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=4")
	spec.Resources.MemoryLimitBytes = 32 << 20
	id := createStart(t, r, spec)
	waitEvent(t, r, id, runtime.StateExited, 20*time.Second)
	st, err := r.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Errorf("status %+v: want OOMKilled, 137", st)
	}
}

func TestExitsReachEventsEvenWhenNotReceived(t *testing.T) {
	r, _, pod := podFixture(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, createStart(t, r, pod.container(fmt.Sprintf("c%d", i), "sh", "-c", "sleep 0.5; exit 2")))
	}
	// Nobody receives while they run and exit.
	time.Sleep(3 * time.Second)
	waitExits(t, r, 10*time.Second, ids...)
}

func TestExitEventLatency(t *testing.T) {
	r, ctx, pod := podFixture(t)
	for i := range 5 {
		id := createStart(t, r, pod.container(fmt.Sprintf("app%d", i), "sh", "-c", "sleep 0.5; exit 0"))
		waitEvent(t, r, id, runtime.StateExited, 10*time.Second)
		received := time.Now()
		st, err := r.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		lag := received.Sub(st.FinishedAt)
		t.Logf("exit → event: %v (relist period %v)", lag, r.cfg.RelistPeriod)
		if lag > r.cfg.RelistPeriod+2*time.Second {
			t.Errorf("exit reported %v after it happened", lag)
		}
	}
}

func TestANewRuntimeReadoptsContainersAndTheirExits(t *testing.T) {
	c := needContainerd(t)
	stateDir := t.TempDir()
	ctx := testCtx(t)
	r1, err := New(ctx, Config{Endpoint: c.endpoint, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	pod := runPod(t, r1, false)
	id := createStart(t, r1, pod.container("app", "sh", "-c", "printf adopted > /dev/termination-log; sleep 3; exit 4"))
	r1.Close() // the agent goes away; the container runs on

	r2 := newRuntime(t, c, stateDir)
	list, err := r2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found *runtime.Status
	for i := range list {
		if list[i].ID == id {
			found = &list[i]
		}
	}
	if found == nil || found.State != runtime.StateRunning || found.SandboxID != pod.id || found.Attempt != 0 || found.TerminationMessageFile == "" {
		t.Fatalf("re-adopted container: %+v", found)
	}
	// The sandbox's config comes back from its annotation: a new container
	// can join it.
	other := createStart(t, r2, pod.container("other", "true"))
	waitExits(t, r2, 10*time.Second, other, id)
	st, err := r2.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 4 {
		t.Errorf("exit %d, want 4", st.ExitCode)
	}
	if b, _ := os.ReadFile(st.TerminationMessageFile); string(b) != "adopted" {
		t.Errorf("termination message %q", b)
	}
	sbs, err := r2.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sbs {
		if s.ID == pod.id && (s.State != runtime.SandboxReady || len(s.IPs) == 0) {
			t.Errorf("re-adopted sandbox %+v", s)
		}
	}
}

// containerd restarts under a running runtime: containers keep running,
// an exit while it was down and one after it came back are both reported,
// each with its own exit code. (On containerd 2.x the first needs
// podvisor's shim: see internal/runtime/containerd/shim's exitKeeper. A 2.x built
// from PODVISOR_TEST_CONTAINERD_DIR with containerd's own shim reports
// 255, Unknown.)
func TestContainerdRestartLosesNoExit(t *testing.T) {
	r, ctx, pod := podFixture(t)
	whileDown := createStart(t, r, pod.container("down", "sh", "-c", "sleep 1; exit 9"))
	afterwards := createStart(t, r, pod.container("after", "sh", "-c", "sleep 6; exit 6"))
	shared.restart(t, func() { time.Sleep(2 * time.Second) }) // "down" exits meanwhile
	waitExits(t, r, 20*time.Second, whileDown, afterwards)
	for id, code := range map[string]int32{whileDown: 9, afterwards: 6} {
		st, err := r.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.ExitCode != code {
			t.Errorf("%s: %+v, want exit %d", st.Name, st, code)
		}
	}
}

func TestInfoAndImages(t *testing.T) {
	c := needContainerd(t)
	r := newRuntime(t, c, t.TempDir())
	ctx := testCtx(t)
	info := r.Set().Info
	if info.Name != "containerd" || info.Version == "" || strings.HasPrefix(info.Version, "v") {
		t.Errorf("info %+v", info)
	}
	t.Logf("runtime %s %s", info.Name, info.Version)

	img, ok, err := r.ImageStatus(ctx, "busybox")
	if err != nil || !ok || !strings.HasPrefix(img.ID, "sha256:") || !slicesContain(img.RepoTags, busyboxImage) || img.Size == 0 {
		t.Errorf("busybox: %+v %v %v", img, ok, err)
	}
	if _, ok, err := r.ImageStatus(ctx, "docker.io/library/nosuch:1"); ok || err != nil {
		t.Errorf("a missing image: ok %v err %v", ok, err)
	}
	list, err := r.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, i := range list {
		tags = append(tags, i.RepoTags...)
	}
	if !slicesContain(tags, busyboxImage) || !slicesContain(tags, "registry.k8s.io/pause:3.10.2") {
		t.Errorf("images %v", tags)
	}
	if _, err := r.ImportImages(ctx, strings.NewReader("")); !runtime.IsInvalid(err) {
		t.Errorf("import: %v, want ErrInvalid (CRI has none)", err)
	}
	if err := r.RemoveImage(ctx, "docker.io/library/nosuch:1"); !runtime.IsNotFound(err) {
		t.Errorf("remove a missing image: %v, want ErrNotFound", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := r.PullImage(pctx, "registry.invalid/nosuch:1", nil); err == nil {
		t.Error("pulling from a registry that does not exist succeeded")
	} else {
		t.Logf("pull error: %v (not found %v, unavailable %v, invalid %v)", err, runtime.IsNotFound(err), runtime.IsUnavailable(err), runtime.IsInvalid(err))
	}
}

func TestUnknownContainers(t *testing.T) {
	c := needContainerd(t)
	r := newRuntime(t, c, t.TempDir())
	ctx := testCtx(t)
	for name, err := range map[string]error{
		"status":         func() error { _, err := r.Status(ctx, "nosuch"); return err }(),
		"start":          r.Start(ctx, "nosuch"),
		"stop":           r.Stop(ctx, "nosuch", time.Second),
		"remove":         r.Remove(ctx, "nosuch"),
		"sandbox status": func() error { _, err := r.SandboxStatus(ctx, "nosuch"); return err }(),
		"stop sandbox":   r.StopSandbox(ctx, "nosuch"),
		"create in an unknown sandbox": func() error {
			_, err := r.Create(ctx, runtime.ContainerSpec{Name: "c", SandboxID: "nosuch", Image: busyboxImage, LogPath: "/tmp/x.log"})
			return err
		}(),
	} {
		if !runtime.IsNotFound(err) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func slicesContain(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
