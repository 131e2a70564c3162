package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Issue 18 item 5: hostile input never crashes the agent. A few hundred
// malformed or hostile pods go through the API; the API refuses some. Every
// accepted one must end with a clear reason (running, a terminal phase, or a
// waiting reason with a message), nothing may be written where the symlink
// and path tricks point, and the agent must keep serving: the node stays
// Ready, a plain pod still runs, podvisor neither exits nor logs a panic.

// hostileCase is one pod spec; want, when set, is the waiting or terminated
// reason its container named wantOn (default "c") must show.
type hostileCase struct {
	pod    *v1.Pod
	want   string
	wantOn string
}

// hostileEnv is where the tricks point: a canary directory that must not
// change, and a scratch directory for mount points and the volumes' paths.
type hostileEnv struct {
	ns, node string
	canary   string // must stay exactly as it is
	scratch  string // mount points (containers share the host's filesystem)
	shmName  string // a file the tricks try to create in the host's /dev/shm
}

func TestHostileSpecs(t *testing.T) {
	t.Parallel()
	if e2eRuntime() == "containerd" {
		// Not a correctness gap: what is checked is the agent's handling of
		// hostile specs, the same on both runtimes. On containerd, 339 pods
		// (a hundred crash-looping every 5 s) need more runc time than 2
		// cores give within the 2-minute settle window (measured: dozens
		// still ContainerCreating at the deadline, after the CRI gate was
		// made fair to new sandboxes).
		t.Skip("runs on the process runtime: on containerd its 339 pods exceed what 2 cores start within the settle window")
	}
	p := NewPodvisor(t, "--config", kubeletConfig(t, "maxPods: 1000\ncrashLoopBackOff:\n  maxContainerRestartPeriod: 5s\n"))
	p.Start()
	ctx := context.Background()
	e := &hostileEnv{ns: p.Namespace("hostile"), node: p.NodeName, canary: t.TempDir(), scratch: t.TempDir(),
		shmName: fmt.Sprintf("podvisor-hostile-%d", time.Now().UnixNano())}
	t.Cleanup(func() { os.Remove(filepath.Join("/dev/shm", e.shmName)) })
	if err := os.WriteFile(filepath.Join(e.canary, "file"), []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.canary, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshotTree(t, e.canary)

	cases := e.cases()
	accepted := map[string]hostileCase{}
	var mu sync.Mutex
	refused := map[string]int{} // by first words of the API's error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, c := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p.adapt(c.pod)
			_, err := p.Admin.CoreV1().Pods(e.ns).Create(ctx, c.pod, metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted[c.pod.Name] = c
			case apierrors.IsInvalid(err) || apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsBadRequest(err) || strings.Contains(err.Error(), "too large"):
				refused[refusalKind(err)]++
			default:
				t.Errorf("create %s: unexpected error %v", c.pod.Name, err)
			}
		}()
	}
	wg.Wait()
	nRefused := 0
	for _, n := range refused {
		nRefused += n
	}
	t.Logf("%d specs: %d accepted, %d refused by the API", len(cases), len(accepted), nRefused)
	for k, n := range refused {
		t.Logf("  refused %3d: %s", n, k)
	}

	// Every accepted pod ends with a clear reason, seen at least once.
	settled := map[string]string{}
	var last map[string]*v1.Pod
	settleStart := time.Now()
	// Generous: 339 pods on two cores shared with the rest of the suite
	// (a run beside benchmarks, load 56, had 25 left after 2 minutes); the
	// loop ends as soon as every pod has settled.
	deadline := time.Now().Add(5 * time.Minute)
	for len(settled) < len(accepted) && time.Now().Before(deadline) {
		list, err := p.Admin.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("list pods: %v", err)
			time.Sleep(time.Second)
			continue
		}
		failedMounts := podsWithEvent(t, p, e.ns, "FailedMount")
		last = map[string]*v1.Pod{}
		for i := range list.Items {
			pod := &list.Items[i]
			last[pod.Name] = pod
			c, ok := accepted[pod.Name]
			if _, done := settled[pod.Name]; done || !ok {
				continue
			}
			if why, ok := clearEnd(pod, failedMounts[pod.Name]); ok && (c.want == "" || hasReason(pod, c.wantOn, c.want)) {
				settled[pod.Name] = why
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("podvisor exited: %v\nstderr:\n%s", p.exitErr, tail(p.Stderr(), 4000))
		case <-time.After(time.Second):
		}
	}
	for name, c := range accepted {
		if _, ok := settled[name]; !ok {
			want := "a clear reason"
			if c.want != "" {
				want = c.want + " on " + c.wantOn
			}
			t.Errorf("pod %s did not end with %s in time:\n%s", name, want, describe(last[name]))
		}
	}
	t.Logf("%d of %d accepted pods settled in %v", len(settled), len(accepted), time.Since(settleStart).Round(time.Second))
	summary := map[string]int{}
	for _, why := range settled {
		summary[why]++
	}
	keys := make([]string, 0, len(summary))
	for k := range summary {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("  ended %3d: %s", summary[k], k)
	}

	// Nothing written where the tricks point.
	if after := snapshotTree(t, e.canary); after != before {
		t.Errorf("the canary directory changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, f := range []string{filepath.Join("/dev/shm", e.shmName), "/etc/podvisor-hostile-pwned", "/podvisor-hostile-pwned"} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("%s was created on the host", f)
		}
	}

	// The agent keeps serving.
	e.checkServing(t, p)

	// Delete them all: every one goes away.
	err := p.Admin.CoreV1().Pods(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 90*time.Second, "every hostile pod deleted", func() (bool, error) {
		list, err := p.Admin.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(list.Items) == 0, fmt.Errorf("%d pods left", len(list.Items))
	})
	if s := p.Stderr(); strings.Contains(s, "panic") {
		t.Errorf("podvisor logged a panic:\n%s", grepLines(s, "panic"))
	}
	select {
	case <-p.exited:
		t.Fatalf("podvisor exited: %v", p.exitErr)
	default:
	}
}

// checkServing: the node is Ready and a plain pod starts and runs.
func (e *hostileEnv) checkServing(t *testing.T, p *Podvisor) {
	t.Helper()
	ctx := context.Background()
	node, err := p.Admin.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady && c.Status != v1.ConditionTrue {
			t.Errorf("node not Ready after the hostile pods: %s %s", c.Reason, c.Message)
		}
	}
	plain := p.pod(e.ns, "plain-after", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
	plain.Spec.NodeName = e.node
	p.create(t, plain)
	p.waitPod(t, e.ns, "plain-after", 60*time.Second, "a plain pod Running and Ready after the hostile ones", func(pod *v1.Pod) bool {
		return pod.Status.Phase == v1.PodRunning && isReady(pod)
	})
}

// clearEnd tells whether the pod is in an end a user can act on, and names it.
func clearEnd(pod *v1.Pod, failedMount bool) (string, bool) {
	switch pod.Status.Phase {
	case v1.PodSucceeded, v1.PodFailed:
		if pod.Status.Phase == v1.PodFailed && pod.Status.Reason != "" {
			return "Failed/" + pod.Status.Reason, true
		}
		for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
			for _, cs := range list {
				if cs.State.Terminated == nil || cs.State.Terminated.Reason == "" {
					if cs.State.Waiting == nil && cs.State.Running == nil {
						return "", false
					}
				}
			}
		}
		return string(pod.Status.Phase) + "/" + terminatedReasons(pod), true
	case "":
		return "", false
	}
	n := len(pod.Spec.InitContainers) + len(pod.Spec.Containers)
	if len(pod.Status.InitContainerStatuses)+len(pod.Status.ContainerStatuses) != n {
		return "", false
	}
	// Running pods count once every regular container runs.
	if pod.Status.Phase == v1.PodRunning {
		all := true
		for _, cs := range pod.Status.ContainerStatuses {
			all = all && cs.State.Running != nil
		}
		if all {
			return "Running", true
		}
	}
	// Otherwise some container must say why it is not running.
	for _, list := range [][]v1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			w := cs.State.Waiting
			if w == nil {
				continue
			}
			switch w.Reason {
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff":
				if w.Message != "" {
					return "waiting/" + w.Reason, true
				}
			case "ContainerCreating":
				if failedMount {
					return "waiting/ContainerCreating+FailedMount", true
				}
			}
		}
	}
	return "", false
}

func terminatedReasons(pod *v1.Pod) string {
	seen := map[string]bool{}
	var out []string
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && !seen[t.Reason] {
			seen[t.Reason] = true
			out = append(out, t.Reason)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// hasReason: the container shows reason as its waiting or terminated reason,
// now or as its last state.
func hasReason(pod *v1.Pod, container, reason string) bool {
	cs := containerStatus(pod, container)
	if cs == nil {
		return false
	}
	for _, s := range []v1.ContainerState{cs.State, cs.LastTerminationState} {
		if (s.Waiting != nil && s.Waiting.Reason == reason) || (s.Terminated != nil && s.Terminated.Reason == reason) {
			return true
		}
	}
	return false
}

// podsWithEvent are the pods of ns with at least one event of that reason.
func podsWithEvent(t *testing.T, p *Podvisor, ns, reason string) map[string]bool {
	t.Helper()
	evs, err := p.Admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + reason})
	out := map[string]bool{}
	if err != nil {
		return out
	}
	for _, ev := range evs.Items {
		out[ev.InvolvedObject.Name] = true
	}
	return out
}

// refusalKind is the first field the API named in its refusal, with its
// index numbers dropped, or the error's first words.
func refusalKind(err error) string {
	s := err.Error()
	if i := strings.Index(s, "is invalid: "); i >= 0 {
		s = strings.TrimLeft(s[i+len("is invalid: "):], "[")
		if j := strings.Index(s, ":"); j > 0 {
			s = s[:j]
		}
		for _, d := range "0123456789" {
			s = strings.ReplaceAll(s, string(d), "")
		}
		return s
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// snapshotTree describes every entry under dir: path, mode, size, mtime and
// a hash of regular files.
func snapshotTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d", strings.TrimPrefix(path, dir), fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, tail(l, 2000))
		}
	}
	if len(out) > 20 {
		out = out[:20]
	}
	return strings.Join(out, "\n")
}

// --- the specs ---

// base is a pod on the node with one container c running script, restart
// policy Never unless changed, grace 1 s.
func (e *hostileEnv) base(name, script string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: v1.PodSpec{
			NodeName:                      e.node,
			RestartPolicy:                 v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []v1.Container{{Name: "c", Image: "none", Command: []string{"sh", "-c", script}}},
		},
	}
}

func (e *hostileEnv) cases() []hostileCase {
	var out []hostileCase
	for _, gen := range []func() []hostileCase{e.envCases, e.commandCases, e.probeCases, e.subPathCases, e.timeCases,
		e.hostPathCases, e.terminationMessageCases, e.nameCases, e.manyContainerCases, e.miscCases} {
		out = append(out, gen()...)
	}
	return out
}

func (e *hostileEnv) envCases() []hostileCase {
	var out []hostileCase
	add := func(name string, env []v1.EnvVar, script string) {
		pod := e.base("env-"+name, script)
		pod.Spec.Containers[0].Env = env
		out = append(out, hostileCase{pod: pod})
	}
	many := func(n, size int) []v1.EnvVar {
		var env []v1.EnvVar
		for i := range n {
			env = append(env, v1.EnvVar{Name: fmt.Sprintf("V%05d", i), Value: strings.Repeat("x", size)})
		}
		return env
	}
	for _, n := range []int{100, 1000, 10000} {
		for _, size := range []int{10, 1000, 100000} {
			add(fmt.Sprintf("many-%d-%d", n, size), many(n, size), "true")
		}
	}
	add("one-200k", []v1.EnvVar{{Name: "BIG", Value: strings.Repeat("y", 200000)}}, "true")
	add("one-100k", []v1.EnvVar{{Name: "BIG", Value: strings.Repeat("y", 100000)}}, `test ${#BIG} -eq 100000`)
	// $(VAR) expansion that grows exponentially: 1 KiB, then x100 per level.
	bomb := []v1.EnvVar{{Name: "A", Value: strings.Repeat("a", 1024)}}
	for i, n := range []string{"B", "C", "D", "E", "F"} {
		bomb = append(bomb, v1.EnvVar{Name: n, Value: strings.Repeat("$("+bomb[i].Name+")", 100)})
	}
	add("bomb", bomb, "true")
	bombArgs := e.base("env-bomb-args", "true")
	bombArgs.Spec.Containers[0].Env = bomb[:4]
	bombArgs.Spec.Containers[0].Args = []string{strings.Repeat("$(D)", 1000)}
	out = append(out, hostileCase{pod: bombArgs})
	add("self-reference", []v1.EnvVar{{Name: "A", Value: "$(A)$(A)"}, {Name: "B", Value: "$(B"}, {Name: "C", Value: "$$(A)$"}}, "true")
	add("weird-names", []v1.EnvVar{{Name: "a.b-c", Value: "1"}, {Name: "with space", Value: "2"}, {Name: "=x", Value: "3"}, {Name: "é", Value: "4"}}, "true")
	add("nul-and-newlines", []v1.EnvVar{{Name: "N", Value: "a\nb\r\nc\x00d"}}, "true")
	add("path-empty", []v1.EnvVar{{Name: "PATH", Value: ""}}, "true")
	add("fieldref-bogus", []v1.EnvVar{{Name: "F", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations['x']"}}}}, "true")
	add("missing-configmap", []v1.EnvVar{{Name: "M", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Key: "k"}}}}, "true")
	return out
}

func (e *hostileEnv) commandCases() []hostileCase {
	var out []hostileCase
	cmds := map[string][]string{
		"nonexistent":       {"/nonexistent/bin/podvisor-hostile"},
		"not-in-path":       {"podvisor-hostile-no-such-command"},
		"empty-string":      {""},
		"not-executable":    {"/etc/hostname"},
		"directory":         {"/"},
		"dev-null":          {"/dev/null"},
		"proc-self-exe":     {"/proc/self/exe", "--help"},
		"long-argv":         append([]string{"echo"}, repeatStrings("arg", 20000)...),
		"huge-arg":          {"echo", strings.Repeat("z", 200000)},
		"big-arg":           {"echo", strings.Repeat("z", 100000)},
		"newline-in-name":   {"/bin/tr\nue"},
		"deep-subshells":    {"sh", "-c", strings.Repeat("(", 200) + "true" + strings.Repeat(")", 200)},
		"deep-expansion":    {"sh", "-c", strings.Repeat("$(echo ", 100) + "x" + strings.Repeat(")", 100)},
		"undefined-vars":    {"echo", "$(UNDEFINED)", "$(", "$$(X)", "$"},
		"exit-255":          {"sh", "-c", "exit 255"},
		"kill-self":         {"sh", "-c", "kill -9 $$"},
		"segfault-signal":   {"sh", "-c", "kill -SEGV $$"},
		"stop-self":         {"sh", "-c", "kill -STOP $$"},
		"fork-and-exit":     {"sh", "-c", "(sleep 600 &) ; exit 0"},
		"close-stdout":      {"sh", "-c", "exec >&- 2>&-; sleep 1"},
		"binary-output":     {"sh", "-c", "head -c 100000 /dev/urandom"},
		"long-line":         {"sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a; exit 1"},
		"ignores-sigterm":   {"sh", "-c", "trap '' TERM; sleep 600"},
		"unicode":           {"sh", "-c", "echo 'héllo wörld ☃'"},
		"workingdir-is-cwd": {"sh", "-c", "pwd"},
	}
	for name, cmd := range cmds {
		for _, policy := range []v1.RestartPolicy{v1.RestartPolicyNever, v1.RestartPolicyOnFailure, v1.RestartPolicyAlways} {
			pod := e.base(fmt.Sprintf("cmd-%s-%s", name, strings.ToLower(string(policy))), "")
			pod.Spec.RestartPolicy = policy
			pod.Spec.Containers[0].Command = cmd
			out = append(out, hostileCase{pod: pod})
		}
	}
	noCmd := e.base("cmd-none", "")
	noCmd.Spec.Containers[0].Command = nil
	out = append(out, hostileCase{pod: noCmd, want: "CreateContainerConfigError", wantOn: "c"})
	for _, wd := range []string{"/nonexistent-hostile", "/etc/hostname", "/proc/self/fd", "relative/dir", strings.Repeat("/d", 3000)} {
		pod := e.base("wd-"+fmt.Sprintf("%x", sha256.Sum256([]byte(wd)))[:12], "pwd")
		pod.Spec.Containers[0].WorkingDir = wd
		out = append(out, hostileCase{pod: pod})
	}
	return out
}

func repeatStrings(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func (e *hostileEnv) probeCases() []hostileCase {
	var out []hostileCase
	handlers := map[string]v1.ProbeHandler{
		"http-named-port":   {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("nope")}},
		"http-port-65535":   {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(65535)}},
		"http-port-0":       {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(0)}},
		"http-port-70000":   {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(70000)}},
		"http-port-neg":     {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(-1)}},
		"http-bad-host":     {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(1), Host: "999.999.999.999"}},
		"http-weird-path":   {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(1), Path: "/%zz/../\x7f?a=%%"}},
		"http-bad-scheme":   {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(1), Scheme: "GOPHER"}},
		"http-bad-header":   {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(1), HTTPHeaders: []v1.HTTPHeader{{Name: "bad header", Value: "x"}}}},
		"http-host-header":  {HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(1), HTTPHeaders: []v1.HTTPHeader{{Name: "Host", Value: "\r\nX: y"}}}},
		"tcp-named-port":    {TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("nope")}},
		"tcp-port-0":        {TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(0)}},
		"grpc-port-0":       {GRPC: &v1.GRPCAction{Port: 0}},
		"grpc-port-65536":   {GRPC: &v1.GRPCAction{Port: 65536}},
		"grpc-bad-service":  {GRPC: &v1.GRPCAction{Port: 1, Service: ptr.To(strings.Repeat("s", 10000))}},
		"exec-nonexistent":  {Exec: &v1.ExecAction{Command: []string{"/nonexistent-hostile"}}},
		"exec-empty":        {Exec: &v1.ExecAction{}},
		"exec-huge-output":  {Exec: &v1.ExecAction{Command: []string{"sh", "-c", "head -c 20000000 /dev/zero"}}},
		"exec-never-ends":   {Exec: &v1.ExecAction{Command: []string{"sleep", "600"}}},
		"exec-bomb-command": {Exec: &v1.ExecAction{Command: []string{strings.Repeat("$(A)", 100000)}}},
	}
	timings := map[string]v1.Probe{
		"fast":   {PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1},
		"absurd": {PeriodSeconds: math.MaxInt32, TimeoutSeconds: math.MaxInt32, InitialDelaySeconds: math.MaxInt32, FailureThreshold: math.MaxInt32, SuccessThreshold: math.MaxInt32},
		"neg":    {PeriodSeconds: -1, TimeoutSeconds: -1, InitialDelaySeconds: -1},
	}
	for hname, h := range handlers {
		for tname, timing := range timings {
			for _, kind := range []string{"liveness", "readiness", "startup"} {
				if tname == "neg" && kind != "liveness" {
					continue
				}
				probe := timing
				probe.ProbeHandler = h
				if kind != "readiness" {
					probe.SuccessThreshold = 0
				}
				pod := e.base(fmt.Sprintf("probe-%s-%s-%s", hname, tname, kind), "sleep 30")
				pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "A", Value: strings.Repeat("a", 1000)}}
				switch kind {
				case "liveness":
					pod.Spec.Containers[0].LivenessProbe = &probe
				case "readiness":
					pod.Spec.Containers[0].ReadinessProbe = &probe
				case "startup":
					pod.Spec.Containers[0].StartupProbe = &probe
				}
				out = append(out, hostileCase{pod: pod})
			}
		}
	}
	return out
}

// subPathCases: an init container leaves symlinks in an emptyDir that lead
// out of it (to the canary, /, /etc, up the tree); the main container asks
// for them as subPath or subPathExpr and writes where its mount lands. Each
// one that leads out must be refused with CreateContainerConfigError.
func (e *hostileEnv) subPathCases() []hostileCase {
	var out []hostileCase
	links := fmt.Sprintf(`cd "$VOL" && ln -s %[1]s link && ln -s / root && ln -s /etc etc && ln -s ../../../../../../../.. up && `+
		`mkdir -p real/sub && ln -s real inside && ln -s %[1]s/file filelink && ln -s %[1]s/nonexistent dangling && `+
		`ln -s link chain && ln -s /proc/self/root procroot`, e.canary)
	mk := func(name string, mount v1.VolumeMount, env []v1.EnvVar, escapes bool) {
		mp := filepath.Join(e.scratch, "sub-"+name)
		mount.Name, mount.MountPath = "vol", mp
		script := fmt.Sprintf(`echo pwned >> %[1]s/pwned-%[2]s 2>/dev/null || echo pwned >> %[1]s 2>/dev/null; `+
			`touch %[1]s/podvisor-hostile-pwned 2>/dev/null; exit 0`, mp, name)
		pod := e.base("subpath-"+name, script)
		pod.Spec.Volumes = []v1.Volume{{Name: "vol", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		initMP := filepath.Join(e.scratch, "init-"+name)
		pod.Spec.InitContainers = []v1.Container{{Name: "links", Image: "none", Command: []string{"sh", "-c", links},
			Env:          []v1.EnvVar{{Name: "VOL", Value: initMP}},
			VolumeMounts: []v1.VolumeMount{{Name: "vol", MountPath: initMP}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount}
		pod.Spec.Containers[0].Env = env
		c := hostileCase{pod: pod}
		if escapes {
			c.want, c.wantOn = "CreateContainerConfigError", "c"
		}
		out = append(out, c)
	}
	escaping := []string{"link", "link/dir", "link/newdir", "link/a/b/c", "root", "root/tmp", "root/etc", "etc", "etc/newdir",
		"up", "up/etc", "filelink", "dangling", "dangling/x", "chain", "chain/newdir", "procroot", "procroot/etc",
		"inside/../link", "../escape", "/etc", "real/../../x"}
	inside := []string{"inside", "inside/sub", "real/sub/new", "new/dir", "...", "a b", strings.Repeat("d/", 100)}
	for i, s := range escaping {
		mk(fmt.Sprintf("out-%d", i), v1.VolumeMount{SubPath: s}, nil, true)
		mk(fmt.Sprintf("out-expr-%d", i), v1.VolumeMount{SubPathExpr: "$(X)"}, []v1.EnvVar{{Name: "X", Value: s}}, true)
	}
	for i, s := range inside {
		mk(fmt.Sprintf("in-%d", i), v1.VolumeMount{SubPath: s}, nil, false)
		mk(fmt.Sprintf("in-expr-%d", i), v1.VolumeMount{SubPathExpr: "$(X)"}, []v1.EnvVar{{Name: "X", Value: s}}, false)
	}
	mk("expr-long", v1.VolumeMount{SubPathExpr: "$(X)"}, []v1.EnvVar{{Name: "X", Value: strings.Repeat("x", 5000)}}, false)
	mk("expr-undefined", v1.VolumeMount{SubPathExpr: "$(UNDEFINED)/x"}, nil, false)
	mk("expr-empty", v1.VolumeMount{SubPathExpr: "$(X)"}, []v1.EnvVar{{Name: "X", Value: ""}}, false)
	mk("expr-pod-name", v1.VolumeMount{SubPathExpr: "$(POD)/../.."}, []v1.EnvVar{{Name: "POD", ValueFrom: &v1.EnvVarSource{
		FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}, true)
	return out
}

func (e *hostileEnv) timeCases() []hostileCase {
	var out []hostileCase
	for _, g := range []int64{0, 1, 2, 1 << 31, 10_000_000_000, math.MaxInt64} {
		for _, d := range []*int64{nil, ptr.To[int64](1), ptr.To[int64](math.MaxInt32), ptr.To[int64](0), ptr.To[int64](-1), ptr.To[int64](math.MaxInt64)} {
			dn := "none"
			if d != nil {
				dn = fmt.Sprint(*d)
			}
			pod := e.base(fmt.Sprintf("time-g%d-d%s", g, dn), "sleep 20")
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(g)
			pod.Spec.ActiveDeadlineSeconds = d
			pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: min(g, 5)}}}
			out = append(out, hostileCase{pod: pod})
		}
	}
	return out
}

func (e *hostileEnv) hostPathCases() []hostileCase {
	var out []hostileCase
	file := filepath.Join(e.scratch, "hostpath-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		panic(err)
	}
	type hp struct {
		path string
		typ  v1.HostPathType
	}
	paths := []hp{
		{"/proc", ""}, {"/sys", ""}, {"/dev", ""}, {"/", ""}, {"/proc/self/root", ""}, {"/proc/1/root", ""},
		{"/proc/sysrq-trigger", v1.HostPathFile}, {"/dev/null", v1.HostPathCharDev}, {"/dev/null", v1.HostPathDirectory},
		{"/dev/null", v1.HostPathBlockDev}, {"/etc/hostname", v1.HostPathSocket}, {"/run", v1.HostPathSocket},
		{filepath.Join(e.scratch, "hp-new-dir"), v1.HostPathDirectoryOrCreate}, {filepath.Join(e.scratch, "hp-new-file"), v1.HostPathFileOrCreate},
		{filepath.Join(e.scratch, "hp-missing"), v1.HostPathDirectory}, {filepath.Join(e.scratch, "hp-missing-untyped"), ""},
		{file, v1.HostPathDirectoryOrCreate}, {file, v1.HostPathDirectory}, {"/proc/self/fd/0", ""},
		{"relative/path", ""}, {"/../../etc", ""}, {"/etc/../etc", v1.HostPathDirectory},
		{filepath.Join(e.scratch, "hp-new-dir2"), "Bogus"},
	}
	for i, h := range paths {
		for _, ro := range []bool{false, true} {
			pod := e.base(fmt.Sprintf("hostpath-%d-%v", i, ro), "true")
			pod.Spec.Volumes = []v1.Volume{{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: h.path, Type: ptr.To(h.typ)}}}}
			pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "h", MountPath: filepath.Join(e.scratch, fmt.Sprintf("hp-mnt-%d-%v", i, ro)), ReadOnly: ro}}
			out = append(out, hostileCase{pod: pod})
		}
	}
	return out
}

func (e *hostileEnv) terminationMessageCases() []hostileCase {
	var out []hostileCase
	// The container writes only where writing cannot harm the host even if
	// it were not in a namespace of its own; the rest only exit.
	write := map[string]bool{
		filepath.Join("/dev/shm", e.shmName): true, "/dev/hostile/deep/x": true, filepath.Join(e.scratch, "tm/x"): true,
		filepath.Join(e.scratch, "tm-dir"): true, "/dev/termination-log": true,
	}
	if err := os.MkdirAll(filepath.Join(e.scratch, "tm-dir"), 0o755); err != nil {
		panic(err)
	}
	paths := []string{
		"/proc/self/status", "/proc/sys/kernel/hostname", "/proc/nonexistent/x", "/sys/kernel/podvisor-hostile", "/dev/null",
		"/", "/etc", "relative", "", strings.Repeat("/x", 3000), "/dev/shm", "/proc/1/root/etc/hostname",
	}
	for p := range write {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for i, path := range paths {
		for _, policy := range []v1.TerminationMessagePolicy{v1.TerminationMessageReadFile, v1.TerminationMessageFallbackToLogsOnError} {
			script := "echo out; exit 1"
			if write[path] {
				script = fmt.Sprintf("echo bye > %q; exit 1", path)
			}
			pod := e.base(fmt.Sprintf("termmsg-%d-%s", i, strings.ToLower(string(policy))), script)
			pod.Spec.Containers[0].TerminationMessagePath = path
			pod.Spec.Containers[0].TerminationMessagePolicy = policy
			out = append(out, hostileCase{pod: pod})
		}
	}
	// A huge message: only the last 4096 bytes count.
	pod := e.base("termmsg-huge", "head -c 10000000 /dev/zero | tr '\\0' m > /dev/termination-log; exit 3")
	out = append(out, hostileCase{pod: pod, want: "Error", wantOn: "c"})
	return out
}

func (e *hostileEnv) nameCases() []hostileCase {
	var out []hostileCase
	long := func(n int) string { return strings.Repeat("n", n) }
	for _, n := range []int{63, 200, 253, 254} {
		pod := e.base(long(n), "true")
		out = append(out, hostileCase{pod: pod})
	}
	pod := e.base("long-container-name", "true")
	pod.Spec.Containers[0].Name = long(63)
	out = append(out, hostileCase{pod: pod})
	pod = e.base("long-container-name-64", "true")
	pod.Spec.Containers[0].Name = long(64)
	out = append(out, hostileCase{pod: pod})
	pod = e.base(strings.Repeat("a.", 126)+"b", "true") // 253 with dots
	out = append(out, hostileCase{pod: pod})
	return out
}

func (e *hostileEnv) manyContainerCases() []hostileCase {
	var out []hostileCase
	for _, n := range []int{30, 60} {
		pod := e.base(fmt.Sprintf("many-containers-%d", n), "true")
		pod.Spec.Containers = nil
		for i := range n {
			pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", i), Image: "none", Command: []string{"true"}})
		}
		out = append(out, hostileCase{pod: pod})
	}
	pod := e.base("many-inits", "true")
	for i := range 30 {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: fmt.Sprintf("i%d", i), Image: "none", Command: []string{"true"}})
	}
	out = append(out, hostileCase{pod: pod})
	pod = e.base("many-sidecars", "sleep 2")
	for i := range 20 {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, v1.Container{Name: fmt.Sprintf("s%d", i), Image: "none",
			Command: []string{"sh", "-c", "exit 1"}, RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)})
	}
	out = append(out, hostileCase{pod: pod})
	pod = e.base("duplicate-names", "true")
	pod.Spec.InitContainers = []v1.Container{{Name: "c", Image: "none", Command: []string{"true"}}}
	out = append(out, hostileCase{pod: pod})
	return out
}

func (e *hostileEnv) miscCases() []hostileCase {
	var out []hostileCase
	add := func(name string, f func(*v1.Pod)) {
		pod := e.base("misc-"+name, "sleep 2")
		f(pod)
		out = append(out, hostileCase{pod: pod})
	}
	limit := func(r v1.ResourceName, q string) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Limits = v1.ResourceList{r: resourceMust(q)}
		}
	}
	add("memory-1", limit(v1.ResourceMemory, "1"))
	add("memory-4k", limit(v1.ResourceMemory, "4096"))
	add("memory-huge", limit(v1.ResourceMemory, "1E"))
	add("cpu-1m", limit(v1.ResourceCPU, "1m"))
	add("cpu-huge", limit(v1.ResourceCPU, "1000000"))
	add("user-max", func(p *v1.Pod) {
		p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsUser: ptr.To[int64](math.MaxInt32)}
	})
	add("user-neg", func(p *v1.Pod) {
		p.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsUser: ptr.To[int64](-1)}
	})
	add("group-max", func(p *v1.Pod) {
		p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsGroup: ptr.To[int64](math.MaxInt32), SupplementalGroups: []int64{math.MaxInt32, 0, 1}}
	})
	add("nonroot", func(p *v1.Pod) { p.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)} })
	add("stdin-tty", func(p *v1.Pod) { p.Spec.Containers[0].Stdin, p.Spec.Containers[0].TTY = true, true })
	add("stop-signal-bogus", func(p *v1.Pod) {
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{StopSignal: ptr.To(v1.Signal("SIGBOGUS"))}
	})
	add("poststart-fails", func(p *v1.Pod) {
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"/nonexistent"}}}}
	})
	add("poststart-http-bad", func(p *v1.Pod) {
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("nope")}}}
	})
	add("poststart-sleep-huge", func(p *v1.Pod) {
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](math.MaxInt64)
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: math.MaxInt64}}}
	})
	add("readiness-gate-bogus", func(p *v1.Pod) {
		p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/never"}, {ConditionType: "Ready"}}
	})
	add("hostname-huge", func(p *v1.Pod) { p.Spec.Hostname = strings.Repeat("h", 63); p.Spec.Subdomain = strings.Repeat("s", 63) })
	add("emptydir-memory-tiny", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "m", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{
			Medium: v1.StorageMediumMemory, SizeLimit: ptr.To(resourceMust("1"))}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "m", MountPath: filepath.Join(e.scratch, "tiny")}}
	})
	add("mount-on-root", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "m", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "m", MountPath: "/"}}
	})
	add("mount-on-proc", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "m", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "m", MountPath: "/proc"}}
	})
	add("mount-in-dev-shm", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "m", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "m", MountPath: filepath.Join("/dev/shm", e.shmName)}}
	})
	add("configmap-volume-missing", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "m", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Items: []v1.KeyToPath{{Key: "k", Path: "../../x"}}}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "m", MountPath: filepath.Join(e.scratch, "cm")}}
	})
	add("downward-items-tricks", func(p *v1.Pod) {
		p.Spec.Volumes = []v1.Volume{{Name: "m", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
			Items: []v1.DownwardAPIVolumeFile{{Path: "..data/x", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
				{Path: "a/../../b", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "m", MountPath: filepath.Join(e.scratch, "dw")}}
	})
	return out
}
