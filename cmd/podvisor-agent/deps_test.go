package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoControlPlane: the point of this binary is an agent's memory
// without the control plane's (or containerd's server's) package
// initialisation and pages. One import
// of internal/controlplane (or of the upstream components it embeds) from
// anything the agent reaches would bring them all back, silently.
func TestLinksNoControlPlane(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 || !contains(deps, "github.com/podvisor/podvisor/internal/cli/agentup") {
		t.Fatalf("go list -deps listed %d packages without internal/cli/agentup: not this binary's dependencies", len(deps))
	}
	forbidden := []string{
		"github.com/podvisor/podvisor/internal/controlplane",
		"k8s.io/kubernetes/cmd/kube-apiserver/app",
		"k8s.io/kubernetes/cmd/kube-controller-manager/app",
		"k8s.io/kubernetes/cmd/kube-scheduler/app",
		"k8s.io/kubectl/pkg/cmd",
		"go.etcd.io/etcd/server/v3/embed",
		"sigs.k8s.io/metrics-server/pkg/server",
		// containerd's server runs as podvisor-containerd, a child process:
		// the agent is only its client.
		"github.com/podvisor/podvisor/internal/runtime/containerd/daemon",
		"github.com/containerd/containerd/v2/cmd/containerd/command",
		"github.com/containerd/containerd/v2/plugins/cri",
	}
	for _, f := range forbidden {
		if contains(deps, f) {
			t.Errorf("podvisor-agent links %s", f)
		}
	}
	// The node's service proxy is upstream kube-proxy: the one part of
	// k8s.io/kubernetes the agent keeps.
	for _, d := range deps {
		if strings.HasPrefix(d, "k8s.io/kubernetes/cmd/") && d != "k8s.io/kubernetes/cmd/kube-proxy/app" && !strings.HasPrefix(d, "k8s.io/kubernetes/cmd/kube-proxy/") {
			t.Errorf("podvisor-agent links %s", d)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
