package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// podvisor crictl talks to the node's own containerd with no configuration:
// a running pod is in 'pods', its container in 'ps', its output in 'logs'
// (also with --tail), and inspect reads the container's status.
func TestCrictl(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	ns := p.Namespace("crictl")
	p.create(t, p.pod(ns, "talker", v1.RestartPolicyAlways, sh("speaker", "echo first line; echo crictl-says-hello; exec sleep 3600")))
	p.waitRunning(t, ns, "talker")

	crictl := func(args ...string) string {
		t.Helper()
		out, stderr, code := runPodvisor(t, time.Minute, append([]string{"crictl", "--data-dir", p.DataDir}, args...)...)
		if code != 0 {
			t.Fatalf("podvisor crictl %v: exit %d: %s", args, code, stderr)
		}
		return out
	}
	pods := crictl("pods")
	t.Logf("crictl pods:\n%s", pods)
	if !strings.HasPrefix(pods, "POD ID") || !rowWith(pods, "talker", ns, "Ready") {
		t.Errorf("crictl pods lists no Ready talker in %s", ns)
	}
	ps := crictl("ps")
	t.Logf("crictl ps:\n%s", ps)
	if !strings.HasPrefix(ps, "CONTAINER") || !rowWith(ps, "speaker", "talker", ns, "Running") {
		t.Fatalf("crictl ps lists no running speaker of talker")
	}
	ids := strings.Fields(crictl("ps", "-q", "--name", "^speaker$"))
	if len(ids) != 1 || len(ids[0]) != 64 {
		t.Fatalf("crictl ps -q --name ^speaker$ = %q, want one whole ID", ids)
	}
	Eventually(t, 30*time.Second, "the container's log", func() (bool, error) {
		out := crictl("logs", ids[0])
		return out == "first line\ncrictl-says-hello\n", fmt.Errorf("logs %q", out)
	})
	if out := crictl("logs", "--tail", "1", ids[0][:13]); out != "crictl-says-hello\n" {
		t.Errorf("crictl logs --tail 1 (short ID) = %q, want the last line", out)
	}
	if out := crictl("inspect", ids[0]); !strings.Contains(out, `"state": "CONTAINER_RUNNING"`) || !strings.Contains(out, `"info"`) {
		t.Errorf("crictl inspect: %s", out)
	}
	if out := crictl("images"); !strings.Contains(out, "busybox") {
		t.Errorf("crictl images lists no busybox:\n%s", out)
	}
	_, stderr, code := runPodvisor(t, time.Minute, "crictl", "--data-dir", t.TempDir(), "ps")
	if code == 0 || !strings.Contains(stderr, "no containerd socket") {
		t.Errorf("crictl on a data dir without containerd: exit %d, %q; want a clear error", code, stderr)
	}
}

// rowWith reports whether a line of a table holds every cell.
func rowWith(table string, cells ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		fields := strings.Fields(line)
		all := true
		for _, c := range cells {
			found := false
			for _, f := range fields {
				found = found || f == c
			}
			all = all && found
		}
		if all {
			return true
		}
	}
	return false
}

// crictl is for when the API does not answer: with the control plane
// stopped, a joined node's containers are still listed and their logs read.
func TestCrictlWithTheAPIServerDown(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	a := p.newAgent(t, "crictl-agent", "")
	a.Start()
	ns := p.Namespace("crictl-down")
	pod := p.pod(ns, "survivor", v1.RestartPolicyAlways, sh("keeper", "echo still-here; exec sleep 3600"))
	pod.Spec.NodeName = a.NodeName
	p.create(t, pod)
	p.waitRunning(t, ns, "survivor")
	p.Stop()

	crictl := func(args ...string) string {
		t.Helper()
		out, stderr, code := runPodvisor(t, time.Minute, append([]string{"crictl", "--data-dir", a.DataDir}, args...)...)
		if code != 0 {
			t.Fatalf("podvisor crictl %v: exit %d: %s", args, code, stderr)
		}
		return out
	}
	if ps := crictl("ps"); !rowWith(ps, "keeper", "survivor", ns, "Running") {
		t.Fatalf("with the API server down, crictl ps lists no running keeper:\n%s", ps)
	}
	ids := strings.Fields(crictl("ps", "-q", "--pod", strings.Fields(crictl("pods", "-q", "--name", "^survivor$"))[0]))
	if len(ids) != 1 {
		t.Fatalf("containers of the survivor sandbox: %q", ids)
	}
	if out := crictl("logs", ids[0]); out != "still-here\n" {
		t.Errorf("crictl logs = %q, want still-here", out)
	}
}
