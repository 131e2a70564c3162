package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/images"
)

// A hostPort on containerd (the portmap CNI plugin): the pod's server
// answers on the node's address at that port; a second pod asking for the
// same port (bound to the node, past the scheduler) is refused at admission
// as the kubelet does (NodePorts).
func TestContainerdHostPort(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	importImages(t, p.DataDir, "testserver")
	ns := p.Namespace("hostport")
	port := freePort(t)
	server := func(name string) *v1.Pod {
		pod := p.imagePod(ns, name, images.TestserverImage, v1.RestartPolicyNever, nil, []string{"serve", "--port", "8080"})
		pod.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 8080, HostPort: int32(port)}}
		return pod
	}
	p.create(t, server("first"))
	running := p.waitRunning(t, ns, "first")
	url := fmt.Sprintf("http://%s/hostname", net.JoinHostPort(running.Status.HostIP, fmt.Sprint(port)))
	var body string
	Eventually(t, 30*time.Second, "the pod's server at "+url, func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && resp.StatusCode == 200, err
	})
	if strings.TrimSpace(body) != "first" {
		t.Errorf("%s answered %q, want the pod's hostname", url, body)
	}

	// The scheduler would keep it Pending; bound to the node directly, it
	// meets the node's own admission.
	second := server("second")
	second.Spec.NodeName = p.NodeName
	p.create(t, second)
	refused := p.waitPod(t, ns, "second", 30*time.Second, "refused", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodFailed })
	if refused.Status.Reason != "NodePorts" ||
		refused.Status.Message != "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports" {
		t.Errorf("second pod: reason %q, message %q", refused.Status.Reason, refused.Status.Message)
	}
	p.waitEventMessage(t, ns, "second", "NodePorts", "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports")
}
