package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/host/mounts"
	"github.com/podvisor/podvisor/internal/runtime/containerd"
)

// podvisor reset: refused while podvisor runs; after podvisor stopped
// (its containers running on, as designed), it removes the pod's
// container processes, every mount under the data dir and containerd's
// state dir, that state dir, and the pod network's bridge and masquerade
// rule — and keeps the data dir.
func TestReset(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ns := p.Namespace("reset")
	c := sh("c", "exec sleep 3600")
	tag := tagProcesses(&c)
	p.create(t, p.pod(ns, "left", v1.RestartPolicyAlways, c))
	p.waitRunning(t, ns, "left")
	// Running may be reported before runc's init has exec'd the command.
	Eventually(t, 30*time.Second, "a process of the running container", func() (bool, error) {
		return len(taggedProcesses(tag)) > 0, nil
	})

	reset := func() (string, error) {
		out, err := exec.Command(binary, "reset", "--data-dir", p.DataDir).CombinedOutput()
		return string(out), err
	}
	if out, err := reset(); err == nil || !strings.Contains(out, "podvisor is still running with data dir") {
		t.Fatalf("reset of a running podvisor's data dir: %v, %q; want a refusal", err, out)
	}
	if len(taggedProcesses(tag)) == 0 {
		t.Fatal("the refused reset killed the container")
	}

	p.Stop()
	if len(taggedProcesses(tag)) == 0 {
		t.Fatal("the container did not outlive podvisor: nothing for reset to do")
	}
	out, err := reset()
	if err != nil {
		t.Fatalf("podvisor reset: %v\n%s", err, out)
	}
	t.Logf("podvisor reset: %s", strings.TrimSpace(out))
	if p.Runtime == "containerd" && !strings.Contains(out, "removed 1 pod sandbox(es)") {
		t.Errorf("reset said %q, want the pod's sandbox removed", out)
	}
	Eventually(t, 10*time.Second, "the container's processes gone", func() (bool, error) {
		left := taggedProcesses(tag)
		return len(left) == 0, fmt.Errorf("processes %v", left)
	})

	paths, err := containerd.PathsFor(p.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range mounts.Points() {
		if strings.HasPrefix(mp, p.DataDir+"/") || strings.HasPrefix(mp, paths.State+"/") {
			t.Errorf("still mounted after reset: %s", mp)
		}
	}
	if _, err := os.Stat(paths.State); !os.IsNotExist(err) {
		t.Errorf("containerd's state dir %s after reset: %v", paths.State, err)
	}
	if p.Runtime == "containerd" {
		bridge := paths.DefaultBridge()
		if exec.Command("ip", "link", "show", bridge).Run() == nil {
			t.Errorf("bridge %s still there after reset", bridge)
		}
		rules, _ := exec.Command("iptables", "-w", "-t", "nat", "-S", "POSTROUTING").Output()
		if strings.Contains(string(rules), bridge) {
			t.Errorf("masquerade rule of %s still there after reset:\n%s", bridge, rules)
		}
	}
	if _, err := os.Stat(p.DataDir + "/podvisor.json"); err != nil {
		t.Errorf("reset removed the data dir's state: %v", err)
	}
}
