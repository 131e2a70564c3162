package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/test/images"
)

// The containerd runtime (issue 12): pods run OCI images on a containerd
// podvisor runs itself, each in its own network namespace with an IP from
// the node's pod CIDR.

// imagePod is a one-container pod running image, with the image's own
// entrypoint unless command or args are given.
func (p *Podvisor) imagePod(ns, name, image string, policy v1.RestartPolicy, command, args []string) *v1.Pod {
	c := v1.Container{Name: "c", Image: image, ImagePullPolicy: v1.PullIfNotPresent, Command: command, Args: args}
	return p.pod(ns, name, policy, c)
}

func TestContainerdRunsImages(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	importImages(t, p.DataDir, "busybox", "testserver")
	ns := p.Namespace("images")
	ctx := context.Background()

	node, err := p.Admin.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://2.") {
		t.Errorf("node containerRuntimeVersion = %q, want containerd://2.x", v)
	}
	_, podNet, err := net.ParseCIDR(node.Spec.PodCIDR)
	if err != nil {
		t.Fatalf("node spec.podCIDR %q: %v", node.Spec.PodCIDR, err)
	}

	t.Run("exit code, logs and container ID", func(t *testing.T) {
		t.Parallel()
		p.create(t, p.imagePod(ns, "exit3", images.BusyboxImage, v1.RestartPolicyNever, []string{"sh", "-c", "echo hello from an image; exit 3"}, nil))
		// The phase follows the container's state once the sandbox is
		// stopped (lifecycle.HoldTerminalPhase).
		pod := p.waitPod(t, ns, "exit3", 60*time.Second, "terminated, in a terminal phase", func(pod *v1.Pod) bool {
			return terminated(pod, "c") != nil && (pod.Status.Phase == v1.PodFailed || pod.Status.Phase == v1.PodSucceeded)
		})
		term := terminated(pod, "c")
		if term.ExitCode != 3 || term.Reason != "Error" || !strings.HasPrefix(term.ContainerID, "containerd://") {
			t.Errorf("terminated = %+v, want exit code 3, reason Error, a containerd:// ID", term)
		}
		if pod.Status.Phase != v1.PodFailed {
			t.Errorf("phase = %s, want Failed", pod.Status.Phase)
		}
		p.waitLogs(t, ns, "exit3", "c", 10*time.Second, "hello from an image")
	})

	// Kubernetes' rules over the image's ENTRYPOINT ["/testserver"] and
	// CMD ["pause"]: command replaces both, args replace CMD only.
	t.Run("entrypoint and cmd", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name          string
			command, args []string
			want          []string // log lines
			exitCode      int32
		}{
			{"image-defaults", nil, nil, []string{"waiting for a signal"}, -1},
			{"args-only", nil, []string{"entrypoint-tester", "a b"}, []string{"argv[0]=/testserver", "argv[1]=entrypoint-tester", "argv[2]=a b"}, 0},
			{"command-only", []string{"/testserver", "entrypoint-tester"}, nil, []string{"argv[1]=entrypoint-tester"}, 0},
			{"command-and-args", []string{"/testserver"}, []string{"entrypoint-tester", "x"}, []string{"argv[1]=entrypoint-tester", "argv[2]=x"}, 0},
			// The CMD is dropped with a command of its own: testserver
			// without a mode prints its usage and exits 2.
			{"command-drops-cmd", []string{"/testserver"}, nil, nil, 2},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				p.create(t, p.imagePod(ns, c.name, images.TestserverImage, v1.RestartPolicyNever, c.command, c.args))
				if c.exitCode < 0 {
					p.waitRunning(t, ns, c.name)
				} else {
					pod := p.waitPod(t, ns, c.name, 60*time.Second, "terminated", func(pod *v1.Pod) bool { return terminated(pod, "c") != nil })
					if got := terminated(pod, "c").ExitCode; got != c.exitCode {
						t.Errorf("exit code %d, want %d", got, c.exitCode)
					}
				}
				if len(c.want) > 0 {
					logs := p.waitLogs(t, ns, c.name, "c", 20*time.Second, c.want...)
					if strings.Contains(logs, "argv[2]=pause") || (c.args == nil && c.command != nil && strings.Contains(logs, "pause")) {
						t.Errorf("the image's CMD was kept:\n%s", logs)
					}
				}
			})
		}
	})

	t.Run("pod network", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{"web-a", "web-b"} {
			p.create(t, p.imagePod(ns, name, images.TestserverImage, v1.RestartPolicyAlways, nil, []string{"serve", "--port", "8080"}))
		}
		a, b := p.waitRunning(t, ns, "web-a"), p.waitRunning(t, ns, "web-b")
		ipA, ipB := net.ParseIP(a.Status.PodIP), net.ParseIP(b.Status.PodIP)
		if ipA == nil || ipB == nil || ipA.Equal(ipB) || !podNet.Contains(ipA) || !podNet.Contains(ipB) {
			t.Fatalf("pod IPs %q and %q: want two distinct addresses in the node's pod CIDR %s", a.Status.PodIP, b.Status.PodIP, node.Spec.PodCIDR)
		}
		if len(a.Status.PodIPs) != 1 || a.Status.PodIPs[0].IP != a.Status.PodIP {
			t.Errorf("podIPs = %v, want [%s]", a.Status.PodIPs, a.Status.PodIP)
		}
		// The node reaches a pod, and a pod reaches another.
		waitHTTP(t, "http://"+net.JoinHostPort(a.Status.PodIP, "8080")+"/hostname", "web-a")
		// kubectl port-forward reaches it through containerd's streaming
		// server, with either protocol.
		for name, env := range map[string][]string{"websocket": nil, "spdy": {"KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}} {
			local := freePort(t)
			stderr := p.portForward(t, ns, "web-a", local, 8080, env)
			if body, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/hostname", local)); err != nil || body != "web-a" {
				t.Errorf("port-forward (%s): %q, %v; kubectl: %q", name, body, err, stderr.String())
			}
		}
		p.create(t, p.imagePod(ns, "client", images.BusyboxImage, v1.RestartPolicyNever,
			[]string{"sh", "-c", fmt.Sprintf(`printf 'GET /hostname HTTP/1.0\r\n\r\n' | nc -w 5 %s 8080`, b.Status.PodIP)}, nil))
		pod := p.waitPod(t, ns, "client", 60*time.Second, "terminated", func(pod *v1.Pod) bool { return terminated(pod, "c") != nil })
		logs, _ := p.logs(ns, "client", "c")
		if terminated(pod, "c").ExitCode != 0 || !strings.HasSuffix(strings.TrimSpace(logs), "web-b") {
			t.Errorf("client pod: exit code %d, output %q; want web-b's hostname", terminated(pod, "c").ExitCode, logs)
		}
		// A hostNetwork pod keeps the node's address.
		hn := p.imagePod(ns, "hostnet", images.TestserverImage, v1.RestartPolicyAlways, nil, nil)
		hn.Spec.HostNetwork = true
		p.create(t, hn)
		got := p.waitRunning(t, ns, "hostnet")
		if got.Status.PodIP != got.Status.HostIP || got.Status.PodIP == "" {
			t.Errorf("hostNetwork pod IP %q, host IP %q: want the node's", got.Status.PodIP, got.Status.HostIP)
		}
	})

	t.Run("exec and an isolated filesystem", func(t *testing.T) {
		t.Parallel()
		marker := fmt.Sprintf("/podvisor-e2e-%d", time.Now().UnixNano())
		p.create(t, p.imagePod(ns, "shell", images.BusyboxImage, v1.RestartPolicyAlways,
			[]string{"sh", "-c", "touch " + marker + "; sleep 3600"}, nil))
		p.waitRunning(t, ns, "shell")
		out, errOut, code := p.kubectl(t, "", nil, "-n", ns, "exec", "shell", "--", "sh", "-c", "ls "+marker+" && hostname && ls /")
		if code != 0 || !strings.Contains(out, marker) || !strings.Contains(out, "shell\n") {
			t.Errorf("exec: code %d, stdout %q, stderr %q; want the marker and the pod's hostname", code, out, errOut)
		}
		if strings.Contains(out, "\nwork\n") {
			t.Errorf("the container sees the host's root:\n%s", out)
		}
		if _, err := os.Stat(marker); err == nil {
			os.Remove(marker)
			t.Errorf("a file the container wrote to / is on the host")
		}
		_, errOut, code = p.kubectl(t, "", nil, "-n", ns, "exec", "shell", "--", "sh", "-c", "exit 7")
		if code == 0 || !strings.Contains(errOut, "command terminated with exit code 7") {
			t.Errorf("exec exit 7: code %d, stderr %q", code, errOut)
		}
	})
}

// waitHTTP waits until url answers 200 with want in its body.
func waitHTTP(t *testing.T, url, want string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	Eventually(t, 30*time.Second, url+" answers "+want, func() (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), want), nil
	})
}

// A podvisor restart leaves containerd's containers running; the next
// podvisor re-adopts them: same container, no restart counted, still
// reachable. An image in DATA_DIR/images is imported at start.
func TestContainerdRestartReadoptsAndImportsTheImagesFolder(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	dir := filepath.Join(p.DataDir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"busybox", "testserver"} {
		b, err := os.ReadFile(images.Build(t, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n+".tar"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p.Start()
	ns := p.Namespace("readopt")
	never := p.imagePod(ns, "web", images.TestserverImage, v1.RestartPolicyAlways, nil, []string{"serve"})
	never.Spec.Containers[0].ImagePullPolicy = v1.PullNever
	p.create(t, never)
	before := p.waitRunning(t, ns, "web")
	id := containerStatus(before, "c").ContainerID

	p.Stop()
	p.Start()
	waitHTTP(t, "http://"+net.JoinHostPort(before.Status.PodIP, "8080")+"/hostname", "web")
	after := p.waitPod(t, ns, "web", 60*time.Second, "re-adopted and ready", func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "c")
		return cs != nil && cs.Ready && pod.Status.PodIP != ""
	})
	cs := containerStatus(after, "c")
	if cs.ContainerID != id || cs.RestartCount != 0 || after.Status.PodIP != before.Status.PodIP {
		t.Errorf("after the restart: container %s (restarts %d, IP %s), want %s (0, %s)",
			cs.ContainerID, cs.RestartCount, after.Status.PodIP, id, before.Status.PodIP)
	}
}

// A second node (`podvisor agent`) on containerd runs its own containerd
// and pod network: its pods get addresses from its own pod CIDR, and a pod
// on one node reaches a pod on the other through the host.
func TestContainerdSecondNodeJoinsThePodNetwork(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	importImages(t, p.DataDir, "busybox")
	a := p.newAgent(t, "node-b-"+strings.ToLower(t.Name()), "")
	a.Start()
	importImages(t, a.DataDir, "testserver")
	ns := p.Namespace("twonodes")
	ctx := context.Background()
	nodeCIDR := func(name string) *net.IPNet {
		n, err := p.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, cidr, err := net.ParseCIDR(n.Spec.PodCIDR)
		if err != nil {
			t.Fatalf("node %s: spec.podCIDR %q: %v", name, n.Spec.PodCIDR, err)
		}
		return cidr
	}
	cidrA, cidrB := nodeCIDR(p.NodeName), nodeCIDR(a.NodeName)
	if cidrA.String() == cidrB.String() {
		t.Fatalf("both nodes have pod CIDR %s", cidrA)
	}

	web := p.imagePod(ns, "web-b", images.TestserverImage, v1.RestartPolicyAlways, nil, []string{"serve"})
	web.Spec.NodeName = a.NodeName
	p.create(t, web)
	b := p.waitRunning(t, ns, "web-b")
	if ip := net.ParseIP(b.Status.PodIP); ip == nil || !cidrB.Contains(ip) {
		t.Fatalf("pod on %s has IP %q, want one in its pod CIDR %s", a.NodeName, b.Status.PodIP, cidrB)
	}
	client := p.imagePod(ns, "client-a", images.BusyboxImage, v1.RestartPolicyNever,
		[]string{"sh", "-c", fmt.Sprintf(`printf 'GET /hostname HTTP/1.0\r\n\r\n' | nc -w 5 %s 8080`, b.Status.PodIP)}, nil)
	client.Spec.NodeName = p.NodeName
	p.create(t, client)
	pod := p.waitPod(t, ns, "client-a", 60*time.Second, "terminated", func(pod *v1.Pod) bool { return terminated(pod, "c") != nil })
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil || !cidrA.Contains(ip) {
		t.Errorf("pod on %s has IP %q, want one in its pod CIDR %s", p.NodeName, pod.Status.PodIP, cidrA)
	}
	logs, _ := p.logs(ns, "client-a", "c")
	if terminated(pod, "c").ExitCode != 0 || !strings.HasSuffix(strings.TrimSpace(logs), "web-b") {
		t.Errorf("client on %s: exit code %d, output %q; want web-b's hostname from %s", p.NodeName, terminated(pod, "c").ExitCode, logs, a.NodeName)
	}
	// Both published their lease for the pod network across hosts (podnet,
	// with the node's own credentials); the reach above shows that they
	// left each other's bridge routes alone, sharing this host.
	for _, name := range []string{p.NodeName, a.NodeName} {
		Eventually(t, 30*time.Second, "node "+name+"'s flannel lease", func() (bool, error) {
			n, err := p.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			ip := n.Annotations["flannel.alpha.coreos.com/public-ip"]
			return ip != "" && n.Annotations["flannel.alpha.coreos.com/kube-subnet-manager"] == "true", fmt.Errorf("annotations %v", n.Annotations)
		})
	}
}
