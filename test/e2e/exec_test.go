package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// kubectl runs `podvisor kubectl` against p, with stdin (none when empty)
// and environment added to the test's.
func (p *Podvisor) kubectl(t *testing.T, stdin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append([]string{"kubectl", "--kubeconfig", filepath.Join(p.DataDir, "admin.kubeconfig")}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kubectl %v did not finish within a minute", args)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// portForward runs kubectl port-forward from local to the pod's port with
// env (the protocol choice) until the test ends, once it says it forwards;
// its stderr is returned for messages.
func (p *Podvisor) portForward(t *testing.T, ns, pod string, local, port int, env []string) *syncBuffer {
	t.Helper()
	stderr := &syncBuffer{}
	if _, ok := p.backgroundKubectl(t, env, stderr, "Forwarding from 127.0.0.1",
		"-n", ns, "port-forward", "pod/"+pod, fmt.Sprintf("%d:%d", local, port)); !ok {
		t.Fatalf("kubectl port-forward not forwarding; stderr %q", stderr.String())
	}
	return stderr
}

// backgroundKubectl runs `podvisor kubectl args...` until the test ends and
// waits (30 s at most) for the first line of its stdout that starts with
// ready, which it returns.
func (p *Podvisor) backgroundKubectl(t *testing.T, env []string, stderr io.Writer, ready string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"kubectl", "--kubeconfig", filepath.Join(p.DataDir, "admin.kubeconfig")}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), ready) {
				select {
				case found <- s.Text():
				default:
				}
			}
		}
	}()
	select {
	case line := <-found:
		return line, true
	case <-time.After(30 * time.Second):
		return "", false
	}
}

// remoteCommandProtocols are kubectl's two: WebSocket (the default, passed
// through to the agent) and SPDY (its fallback, forced here).
var remoteCommandProtocols = map[string][]string{
	"websocket": nil,
	"spdy":      {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false"},
}

func (p *Podvisor) waitRunning(t *testing.T, ns, name string) *v1.Pod {
	t.Helper()
	return p.waitPod(t, ns, name, 60*time.Second, "all containers running", func(pod *v1.Pod) bool {
		if pod.Status.Phase != v1.PodRunning || len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
			return false
		}
		for _, s := range pod.Status.ContainerStatuses {
			if s.State.Running == nil {
				return false
			}
		}
		return true
	})
}

func TestKubectlExec(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("exec")
	a, b := sh("a", "exec sleep 3600"), sh("b", "exec sleep 3600")
	a.Env = []v1.EnvVar{{Name: "FOO", Value: "from-a"}}
	b.Env = []v1.EnvVar{{Name: "FOO", Value: "from-b"}}
	b.WorkingDir = t.TempDir()
	p.create(t, p.pod(ns, "two", v1.RestartPolicyAlways, a, b))
	p.waitRunning(t, ns, "two")
	// So the API server passes WebSocket clients through to the agent.
	node, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
	if err != nil || !slices.Contains(node.Status.DeclaredFeatures, "ExtendWebSocketsToKubelet") {
		t.Errorf("node declares %v (%v), want ExtendWebSocketsToKubelet among them", node.Status.DeclaredFeatures, err)
	}

	for name, env := range remoteCommandProtocols {
		t.Run(name, func(t *testing.T) {
			check := func(what, wantOut, wantErr string, wantCode int, stdin string, args ...string) {
				t.Helper()
				o, e, code := p.kubectl(t, stdin, env, append([]string{"-n", ns, "exec"}, args...)...)
				if o != wantOut || !strings.Contains(e, wantErr) || code != wantCode {
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q", what, code, o, e, wantCode, wantOut, wantErr)
				}
			}
			check("the container's env", "from-a\n", "", 0, "", "two", "-c", "a", "--", "sh", "-c", "echo $FOO")
			check("the other container's env and working dir", "from-b\n"+b.WorkingDir+"\n", "", 0, "", "two", "-c", "b", "--", "sh", "-c", "echo $FOO; pwd")
			check("no -c: the first container", "from-a\n", `Defaulted container "a" out of: a, b`, 0, "", "two", "--", "sh", "-c", "echo $FOO")
			check("stdin", "line one\nline two\n", "", 0, "line one\nline two\n", "-i", "two", "-c", "a", "--", "cat")
			check("exit code", "out\n", "err\ncommand terminated with exit code 3\n", 3, "", "two", "-c", "a", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
			check("a command that does not exist", "", `"nosuchcmd": executable file not found in $PATH`, 1, "", "two", "-c", "a", "--", "nosuchcmd")
		})
	}

	// Bad input, with upstream's words.
	p.create(t, p.pod(ns, "half", v1.RestartPolicyNever, sh("runs", "exec sleep 3600"), sh("done", "true")))
	p.waitPod(t, ns, "half", 60*time.Second, "container done exited", func(pod *v1.Pod) bool {
		s := containerStatus(pod, "done")
		return pod.Status.Phase == v1.PodRunning && s != nil && s.State.Terminated != nil
	})
	bad := []struct{ what, stderr string }{
		{"-n " + ns + " exec nosuch -- true", `pods "nosuch" not found`},
		{"-n " + ns + " exec two -c nosuch -- true", "container nosuch is not valid for pod two"},
		{"-n " + ns + " exec half -c done -- true", `container not found ("done")`},
		{"-n " + ns + " attach half -c done", `container not found ("done")`},
	}
	for _, tc := range bad {
		_, e, code := p.kubectl(t, "", nil, strings.Fields(tc.what)...)
		if code != 1 || !strings.Contains(e, tc.stderr) {
			t.Errorf("kubectl %s: exit %d, stderr %q; want 1 and %q", tc.what, code, e, tc.stderr)
		}
	}
}

// kubectl cp is tar through exec with stdin: both ways, into a volume that
// exists only in the container's mount namespace.
func TestKubectlCp(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("cp")
	mnt := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	c := sh("c", "exec sleep 3600")
	c.VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: mnt}}
	pod := p.pod(ns, "files", v1.RestartPolicyAlways, c)
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	p.create(t, pod)
	p.waitRunning(t, ns, "files")

	local := t.TempDir()
	content := strings.Repeat("copied into the pod\n", 1000)
	if err := os.WriteFile(filepath.Join(local, "in.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if o, e, code := p.kubectl(t, "", nil, "cp", filepath.Join(local, "in.txt"), ns+"/files:"+mnt+"/in.txt"); code != 0 {
		t.Fatalf("cp into the pod: exit %d %q %q", code, o, e)
	}
	if o, e, code := p.kubectl(t, "", nil, "-n", ns, "exec", "files", "--", "cat", mnt+"/in.txt"); code != 0 || o != content {
		t.Errorf("the copy in the pod: exit %d, %d bytes, %q", code, len(o), e)
	}
	if _, err := os.Stat(filepath.Join(mnt, "in.txt")); !os.IsNotExist(err) {
		t.Errorf("the copy landed on the host's %s, not in the pod's volume: %v", mnt, err)
	}

	if _, e, code := p.kubectl(t, "", nil, "-n", ns, "exec", "files", "--", "sh", "-c", "seq 1 5000 > "+mnt+"/out.txt"); code != 0 {
		t.Fatalf("writing in the pod: %q", e)
	}
	if o, e, code := p.kubectl(t, "", nil, "cp", ns+"/files:"+mnt+"/out.txt", filepath.Join(local, "out.txt")); code != 0 {
		t.Fatalf("cp from the pod: exit %d %q %q", code, o, e)
	}
	want, _ := exec.Command("seq", "1", "5000").Output()
	if got := readFile(t, filepath.Join(local, "out.txt")); got != string(want) {
		t.Errorf("copied back %d bytes, want %d", len(got), len(want))
	}
}

func TestKubectlPortForward(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("portforward")
	site := t.TempDir()
	if err := os.WriteFile(filepath.Join(site, "index.html"), []byte("hello from the pod"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A server on the pod's loopback only: the forward reaches it from
	// inside the pod's network, as upstream's port-forward does.
	port := freePort(t)
	server := sh("server", fmt.Sprintf("exec busybox httpd -f -p 127.0.0.1:%d -h %s", port, site))
	server.ReadinessProbe = &v1.Probe{ProbeHandler: execProbe("busybox", "wget", "-q", "-O", "/dev/null", fmt.Sprintf("http://127.0.0.1:%d/", port)), PeriodSeconds: 1}
	web := p.pod(ns, "web", v1.RestartPolicyAlways, server)
	shareHostDirs(web, site)
	p.create(t, web)
	p.waitPod(t, ns, "web", 60*time.Second, "Ready: the pod's server answers", isReady)

	for name, env := range map[string][]string{"websocket": nil, "spdy": {"KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}} {
		t.Run(name, func(t *testing.T) {
			local := freePort(t)
			stderr := p.portForward(t, ns, "web", local, port, env)
			for i := range 3 {
				body, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/", local))
				if err != nil || body != "hello from the pod" {
					t.Errorf("request %d through the forward: %q, %v; kubectl: %q", i, body, err, stderr.String())
				}
			}
		})
	}
}

func httpGet(addr string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(addr)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// clientGoExecutors are client-go's executors, through the API server.
var clientGoExecutors = map[string]func(p *Podvisor, ns, pod string, opts *v1.PodExecOptions) (remotecommand.Executor, error){
	"spdy": func(p *Podvisor, ns, pod string, opts *v1.PodExecOptions) (remotecommand.Executor, error) {
		return remotecommand.NewSPDYExecutor(p.AdminCfg, "POST", execRequestURL(p, ns, pod, opts))
	},
	"websocket": func(p *Podvisor, ns, pod string, opts *v1.PodExecOptions) (remotecommand.Executor, error) {
		return remotecommand.NewWebSocketExecutor(p.AdminCfg, "GET", execRequestURL(p, ns, pod, opts).String())
	},
}

func execRequestURL(p *Podvisor, ns, pod string, opts *v1.PodExecOptions) *url.URL {
	return p.Admin.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).
		SubResource("exec").VersionedParams(opts, scheme.ParameterCodec).URL()
}

// A terminal session through client-go: the command runs on a tty whose
// size follows the client's.
func TestClientGoExecOnATerminal(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("exec-tty")
	p.create(t, p.pod(ns, "shell", v1.RestartPolicyAlways, sh("c", "exec sleep 3600")))
	p.waitRunning(t, ns, "shell")
	for name, newExecutor := range clientGoExecutors {
		t.Run(name, func(t *testing.T) {
			e, err := newExecutor(p, ns, "shell", &v1.PodExecOptions{Container: "c", Stdin: true, Stdout: true, TTY: true,
				Command: []string{"sh", "-c", `[ -t 0 ] && echo on-a-tty; while read x; do [ "$x" = q ] && exit 4; stty size; done`}})
			if err != nil {
				t.Fatal(err)
			}
			sizes := make(chan remotecommand.TerminalSize, 2)
			sizes <- remotecommand.TerminalSize{Width: 80, Height: 24}
			stdin, input := io.Pipe()
			defer input.Close()
			var out syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- e.StreamWithContext(context.Background(), remotecommand.StreamOptions{
					Stdin: stdin, Stdout: &out, Tty: true, TerminalSizeQueue: sizeQueue(sizes)})
			}()
			// A size and the input travel on different streams, and the
			// command may start before the first size is set (as with
			// containerd): ask until it shows.
			sizeShows := func(want string) func() (bool, error) {
				return func() (bool, error) {
					io.WriteString(input, "\n")
					time.Sleep(100 * time.Millisecond)
					return strings.Contains(out.String(), want), nil
				}
			}
			Eventually(t, 30*time.Second, "the first size", sizeShows("24 80\r\n"))
			sizes <- remotecommand.TerminalSize{Width: 120, Height: 40}
			Eventually(t, 30*time.Second, "the new size", sizeShows("40 120\r\n"))
			// The command's first line; before it the terminal may have
			// echoed newlines typed while the command started (containerd).
			if !strings.HasPrefix(strings.TrimLeft(out.String(), "\r\n"), "on-a-tty\r\n") {
				t.Errorf("stdin is not a terminal: output %q", out.String())
			}
			io.WriteString(input, "q\n")
			var exit utilexec.ExitError
			select {
			case err := <-done:
				if !errors.As(err, &exit) || exit.ExitStatus() != 4 {
					t.Errorf("session ended with %v, want exit code 4; output %q", err, out.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("session did not end; output %q", out.String())
			}
		})
	}
}

type sizeQueue chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

// Clients that open a session and go away leave neither a process nor a
// goroutine behind in podvisor (a podvisor of its own: the counts are its).
func TestAbandonedExecSessionsLeaveNothing(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ns := p.Namespace("abandon")
	c := sh("c", "exec sleep 3600")
	tag := tagProcesses(&c) // sessions run with the container's environment
	p.create(t, p.pod(ns, "target", v1.RestartPolicyAlways, c))
	p.waitRunning(t, ns, "target")
	processes := func() int { return len(taggedProcesses(tag)) }
	// One session first, so that what the first one starts for good (the
	// runtime's streaming server connections, client caches) is in the baseline.
	abandonSession(t, p, ns, clientGoExecutors["spdy"], false, nil)
	abandonSession(t, p, ns, clientGoExecutors["websocket"], false, nil)
	time.Sleep(2 * time.Second)
	procsBefore, goBefore := processes(), goroutines(t, p)
	// The count sees a session's command.
	abandonSession(t, p, ns, clientGoExecutors["websocket"], true, func() {
		if n := processes(); n != procsBefore+1 {
			t.Errorf("%d processes while a session runs, want %d", n, procsBefore+1)
		}
	})

	const sessions = 200
	begin := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10)
	for i := range sessions {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			abandonSession(t, p, ns, clientGoExecutors[[]string{"spdy", "websocket"}[i%2]], i%4 < 2, nil)
		})
	}
	wg.Wait()
	t.Logf("%d sessions opened and abandoned in %v", sessions, time.Since(begin).Round(time.Millisecond))

	// containerd's CRI lets an abandoned session's command run on, with
	// upstream's kubelet too (kubernetes/kubernetes#89031): there only
	// podvisor's goroutines must come back.
	countProcesses := p.Runtime == "process"
	var procsAfter, goAfter int
	Eventually(t, 60*time.Second, "processes and goroutines back to where they were", func() (bool, error) {
		procsAfter, goAfter = processes(), goroutines(t, p)
		return (procsAfter <= procsBefore || !countProcesses) && goAfter <= goBefore+50,
			fmt.Errorf("processes: %d before, %d now; goroutines: %d before, %d now", procsBefore, procsAfter, goBefore, goAfter)
	})
	t.Logf("processes: %d before, %d after; goroutines: %d before, %d after", procsBefore, procsAfter, goBefore, goAfter)
}

// abandonSession starts a command that runs for long and goes away once it
// printed (after calling during, if set): the client's connection closes under it.
func abandonSession(t *testing.T, p *Podvisor, ns string, newExecutor func(*Podvisor, string, string, *v1.PodExecOptions) (remotecommand.Executor, error), tty bool, during func()) {
	e, err := newExecutor(p, ns, "target", &v1.PodExecOptions{Container: "c", Stdin: true, Stdout: true, TTY: tty,
		Command: []string{"sh", "-c", "echo started; exec sleep 600"}})
	if err != nil {
		t.Error(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	var once sync.Once
	out := writerFunc(func(b []byte) (int, error) {
		if bytes.Contains(b, []byte("started")) {
			once.Do(func() { close(started) })
		}
		return len(b), nil
	})
	stdin, input := io.Pipe()
	defer input.Close()
	done := make(chan error, 1)
	go func() {
		done <- e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: out, Tty: tty})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Errorf("session ended before it started: %v", err)
		return
	case <-time.After(60 * time.Second):
		t.Error("session did not start within 60s")
	}
	if during != nil {
		during()
	}
	cancel()
	<-done
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// goroutines is podvisor's goroutine count (control plane and agent are one
// process), from the API server's metrics.
func goroutines(t *testing.T, p *Podvisor) int {
	t.Helper()
	b, err := p.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatal("no go_goroutines in the API server's metrics")
	return 0
}
