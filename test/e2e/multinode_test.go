package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	cryptorand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/test/images"
	"github.com/podvisor/podvisor/test/netlab"
)

// needMultiNode skips where the multi-node tests cannot run: they make
// network namespaces and a bridge (root) and run agents on containerd.
func needMultiNode(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the multi-node tests make network namespaces and a bridge: they need root")
	}
	if e2eRuntime() != "containerd" {
		t.Skip("the multi-node tests run agents on the containerd runtime (pod network across nodes); PODVISOR_E2E_RUNTIME=" + e2eRuntime())
	}
	needContainerd(t)
}

// The lab itself: every machine reaches the bridge's address and the other
// machines, and a process started in a machine is the command itself (so
// that SIGTERM reaches it), not a wrapper.
func TestMultiNodeLab(t *testing.T) {
	needMultiNode(t)
	lab := newNetLab(t, 2)
	l, err := net.Listen("tcp", net.JoinHostPort(lab.Gateway.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "bridge") })}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	for i := range lab.Hosts {
		out, err := lab.Exec(i, "curl", "-sS", "-m", "5", fmt.Sprintf("http://%s/", l.Addr()))
		if err != nil || out != "bridge" {
			t.Errorf("machine %d → bridge address: %q, %v", i+1, out, err)
		}
		route, _ := lab.Exec(i, "ip", "route", "show", "default")
		if !strings.Contains(route, "via "+lab.Gateway.String()+" dev eth0") {
			t.Errorf("machine %d default route: %q", i+1, route)
		}
	}

	// Machine 2 serves, machine 1 fetches: the bridge forwards between ports.
	www := t.TempDir()
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte("machine 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	httpd := lab.Command(1, "busybox", "httpd", "-f", "-p", fmt.Sprint(port), "-h", www)
	if err := httpd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = httpd.Wait(); close(exited) }()
	t.Cleanup(func() { terminate(httpd, exited) })
	url := fmt.Sprintf("http://%s/", net.JoinHostPort(lab.Hosts[1].Addr.String(), fmt.Sprint(port)))
	Eventually(t, 10*time.Second, "machine 1 → machine 2", func() (bool, error) {
		out, err := lab.Exec(0, "curl", "-sS", "-m", "2", url)
		return err == nil && out == "machine 2", fmt.Errorf("%q: %v", out, err)
	})
	// httpd answers, so nsenter has exec'd it by now.
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", httpd.Process.Pid)); err != nil || filepath.Base(exe) != "busybox" {
		t.Errorf("nsenter did not exec its command: pid %d is %q (%v)", httpd.Process.Pid, exe, err)
	}
	// From the root namespace, machine 2 is reached through the bridge too.
	if _, err := exec.Command("curl", "-sS", "-m", "5", url).Output(); err != nil {
		t.Errorf("root namespace → machine 2: %v", err)
	}
}

// What the agent says when it is refused (internal/cluster/join).
const (
	refusedWrongSecret  = "does not verify with its secret"
	refusedUnknownToken = "carries no signature for token ID"
	// Discovery refuses once the bootstrap signer dropped the token's
	// signature, the TLS bootstrap before that: both messages say expired.
	refusedExpiredToken = "expired"
	refusedWrongCAHash  = "which matches no --ca-cert-hash"
)

// nodeKubeconfig is where a joined agent keeps its credentials.
func nodeKubeconfig(dataDir string) string { return filepath.Join(dataDir, "node.kubeconfig") }

// joinCommand is what `podvisor token create --print-join-command` prints.
type joinCommand struct{ Server, Token, CAHash string }

// createToken runs `podvisor token create` on the server's data dir.
func createToken(t *testing.T, serverDir string, extra ...string) joinCommand {
	t.Helper()
	args := append([]string{"token", "create", "--data-dir", serverDir, "--print-join-command"}, extra...)
	out, errOut, code := runPodvisor(t, time.Minute, args...)
	line := strings.TrimSuffix(out, "\n")
	if code != 0 || strings.Contains(line, "\n") || !strings.HasPrefix(line, "podvisor agent ") {
		t.Fatalf("podvisor %s: exit %d, stdout %q (want one line `podvisor agent --server … --token … --ca-cert-hash …`), stderr:\n%s",
			strings.Join(args, " "), code, out, errOut)
	}
	var j joinCommand
	f := strings.Fields(line)
	for i := 2; i+1 < len(f); i += 2 {
		switch f[i] {
		case "--server":
			j.Server = f[i+1]
		case "--token":
			j.Token = f[i+1]
		case "--ca-cert-hash":
			j.CAHash = f[i+1]
		}
	}
	if !strings.HasPrefix(j.Server, "https://") || len(j.Token) != 23 || j.Token[6] != '.' || !strings.HasPrefix(j.CAHash, "sha256:") {
		t.Fatalf("join command %q: want --server https://…, --token [a-z0-9]{6}.[a-z0-9]{16}, --ca-cert-hash sha256:…", line)
	}
	return j
}

func (j joinCommand) args() []string {
	return []string{"--server", j.Server, "--token", j.Token, "--ca-cert-hash", j.CAHash}
}

// startCluster starts a server and agents joined to it with a bootstrap
// token, one per node name in the lab's first machines. The server calls
// a node gone after 10 s of silence: the agents renew their lease every
// 2 s (a quarter of its duration) rather than 10 s.
func (l *netLab) startCluster(t *testing.T, nodes ...string) (*Podvisor, joinCommand, []*labAgent) {
	t.Helper()
	serverDir := t.TempDir()
	// Not nextClusterCIDR's 10.100-249: podvisors of other tests route
	// those in the root namespace, where a packet to a pod of this cluster
	// would land if this cluster had no route for it.
	clusterCIDR, err := netlab.UnusedPrefix("10.%d.0.0/16", 250, 254)
	if err != nil {
		t.Fatal(err)
	}
	l.startServer(t, serverDir, clusterCIDR.String(), "--node-monitor-grace-period", "10s")
	cp := labControlPlane(t, serverDir)
	join := createToken(t, serverDir)
	// Disk eviction as the harness's podvisors (harnessEviction).
	cfg := kubeletConfig(t, "nodeLeaseDurationSeconds: 8\n"+harnessEviction)
	// The agents route and do not masquerade the server's pod network.
	agents := l.startAgents(t, nodes, append(join.args(), "--runtime", "containerd", "--config", cfg, "--cluster-cidr", clusterCIDR.String())...)
	return cp, join, agents
}

// labControlPlane is the server seen through the Podvisor helpers (the admin
// client, Namespace, waitPod, kubectl).
func labControlPlane(t *testing.T, serverDir string) *Podvisor {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(serverDir, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return &Podvisor{t: t, DataDir: serverDir, Runtime: "containerd", AdminCfg: cfg, Admin: kubernetes.NewForConfigOrDie(cfg)}
}

// Issue 17: three agents, each on its own machine (a network namespace with
// its own address on a bridge), join a `podvisor server` with a bootstrap
// token and work as one cluster; a stopped agent's pods move to the others;
// joins that must not succeed are refused with a clear error.
func TestMultiNode(t *testing.T) {
	needMultiNode(t)
	started := time.Now()
	// Machines 1-3 are the nodes; machine 4 runs the agents that must be refused.
	lab := newNetLab(t, 4)
	nodes := []string{"lab-1", "lab-2", "lab-3"}
	cp, join, agents := lab.startCluster(t, nodes...)
	serverDir := cp.DataDir
	if want := "https://" + lab.Gateway.String() + ":"; !strings.HasPrefix(join.Server, want) {
		t.Errorf("join command's --server %s: want the advertise address, %s…", join.Server, want)
	}
	ctx := context.Background()

	t.Run("nodes are Ready with their machines' addresses", func(t *testing.T) {
		for i, name := range nodes {
			n, err := cp.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !nodeReady(n) {
				t.Errorf("node %s not Ready: %+v", name, n.Status.Conditions)
			}
			if got := nodeAddress(n, v1.NodeInternalIP); got != lab.Hosts[i].Addr.String() {
				t.Errorf("node %s InternalIP %q, want its machine's %s", name, got, lab.Hosts[i].Addr)
			}
		}
	})

	t.Run("each node's certificates come from approved CSRs", func(t *testing.T) {
		nodeCertificatesFromCSRs(t, cp, lab, nodes)
	})

	ns := cp.Namespace("multinode")
	dep := spreadDeployment(ns, "web", 6)
	if _, err := cp.Admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var byNode map[string][]v1.Pod
	spread := t.Run("6 replicas spread 2 per node", func(t *testing.T) {
		byNode = waitReplicas(t, cp, ns, "app=web", 6, 2*time.Minute)
		for _, name := range nodes {
			if len(byNode[name]) != 2 {
				t.Errorf("node %s runs %d replicas, want 2 (%s)", name, len(byNode[name]), podsPerNode(byNode))
			}
		}
	})
	if !spread {
		t.FailNow()
	}

	t.Run("a pod reaches a pod on another node", func(t *testing.T) {
		for i, from := range nodes {
			to := nodes[(i+1)%len(nodes)]
			src, dst := byNode[from][0], byNode[to][0]
			// nc, not wget: the static busybox's wget crashes (SIGSEGV) in
			// this image.
			get := fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s 8080`, dst.Status.PodIP)
			var last string
			err := poll(10*time.Second, func() bool {
				o, e, code := cp.kubectl(t, "", nil, "-n", ns, "exec", src.Name, "--", "sh", "-c", get)
				last = fmt.Sprintf("exit %d, stdout %q, stderr %q", code, o, e)
				return code == 0 && strings.HasSuffix(strings.TrimSpace(o), dst.Name)
			})
			if err != nil {
				routes, _ := lab.Exec(i, "ip", "route")
				t.Errorf("%s on %s → %s on %s at %s:8080: %s\n%s's routes:\n%s", src.Name, from, dst.Name, to, dst.Status.PodIP, last, from, routes)
			}
		}
	})

	// The server's metrics-server scrapes every joined node's agent API.
	t.Run("kubectl top node shows every node", func(t *testing.T) { waitTopNodes(t, cp, nodes...) })

	t.Run("Services and names reach pods on every node", func(t *testing.T) {
		servicesAcrossNodes(t, cp, lab, ns, nodes, byNode)
	})

	t.Run("logs and exec reach pods on every node", func(t *testing.T) {
		for _, name := range nodes {
			pod := byNode[name][0]
			o, e, code := cp.kubectl(t, "", nil, "-n", ns, "logs", pod.Name)
			if code != 0 || !strings.Contains(o, "serving "+pod.Name) {
				t.Errorf("kubectl logs %s (node %s): exit %d, stdout %q, stderr %q", pod.Name, name, code, o, e)
			}
			o, e, code = cp.kubectl(t, "", nil, "-n", ns, "exec", pod.Name, "--", "cat", "/www/index.html")
			if code != 0 || strings.TrimSpace(o) != pod.Name {
				t.Errorf("kubectl exec %s (node %s): exit %d, stdout %q, stderr %q", pod.Name, name, code, o, e)
			}
		}
	})

	// In parallel: discovery waits 15 s for a signature of an unknown token.
	t.Run("refused", func(t *testing.T) {
		refused := func(t *testing.T, want string, args ...string) {
			t.Helper()
			args = append([]string{"--data-dir", t.TempDir(), "--runtime", "containerd"}, args...)
			out, errOut, code := runInMachine(t, lab, 3, time.Minute, args...)
			msg := strings.TrimSpace(errOut)
			if code == 0 || strings.Contains(msg, "\n") || !strings.Contains(msg, want) {
				t.Errorf("podvisor agent %s: exit %d, want non-zero and one line on stderr containing %q; stdout %q, stderr:\n%s",
					strings.Join(args, " "), code, want, out, errOut)
			} else {
				t.Logf("refused: %s", msg)
			}
		}
		id, _, _ := strings.Cut(join.Token, ".")
		t.Run("wrong token secret", func(t *testing.T) {
			t.Parallel()
			bad := join
			bad.Token = id + ".0123456789abcdef"
			refused(t, refusedWrongSecret, append(bad.args(), "--node-name", "lab-x")...)
		})
		t.Run("unknown token id", func(t *testing.T) {
			t.Parallel()
			bad := join
			bad.Token = "zzzzzz.0123456789abcdef"
			refused(t, refusedUnknownToken, append(bad.args(), "--node-name", "lab-x")...)
		})
		t.Run("wrong CA hash", func(t *testing.T) {
			t.Parallel()
			bad := join
			bad.CAHash = "sha256:" + strings.Repeat("0", 64)
			refused(t, refusedWrongCAHash, append(bad.args(), "--node-name", "lab-x")...)
		})
		t.Run("expired token", func(t *testing.T) {
			t.Parallel()
			short := createToken(t, serverDir, "--ttl", "1s")
			// Waiting for time itself: the token's expiration is in whole seconds.
			time.Sleep(2500 * time.Millisecond)
			refused(t, refusedExpiredToken, append(short.args(), "--node-name", "lab-x")...)
		})
		t.Run("a node's credentials with another node's name", func(t *testing.T) {
			t.Parallel()
			refused(t, fmt.Sprintf("node %q is not allowed to modify node %q", nodes[0], nodes[1]), "--kubeconfig", nodeKubeconfig(agents[0].DataDir), "--node-name", nodes[1])
		})
		t.Run("a node's credentials reach only its own node, its pods' secrets and its own certificates", func(t *testing.T) {
			t.Parallel()
			nodeCredentialsAreRestricted(t, cp, ns, agents[0], agents[1])
		})
	})

	t.Run("a claim of the default class is provisioned by the node its pod runs on", func(t *testing.T) {
		localPathOnAgent(t, cp, ns, agents[1])
	})

	t.Run("a stopped agent's node turns NotReady and its pods move", func(t *testing.T) {
		gone := agents[2]
		gone.Stop()
		if code := gone.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("agent %s exit code %d after SIGTERM; stderr:\n%s", gone.Node, code, gone.stderr)
		}
		// A stopped agent leaves its pods alone: they are the control
		// plane's to move (only after 10 s of silence and 5 s of toleration).
		for _, was := range byNode[gone.Node] {
			p, err := cp.Admin.CoreV1().Pods(ns).Get(ctx, was.Name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("right after its agent stopped, pod %s on %s: %v", was.Name, gone.Node, err)
			} else if p.DeletionTimestamp != nil || !isReady(p) {
				t.Errorf("right after its agent stopped, pod %s on %s is deleted or not Ready:\n%s", was.Name, gone.Node, describe(p))
			}
		}
		Eventually(t, time.Minute, "node "+gone.Node+" NotReady and tainted unreachable", func() (bool, error) {
			n, err := cp.Admin.CoreV1().Nodes().Get(ctx, gone.Node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, taint := range n.Spec.Taints {
				if taint.Key == v1.TaintNodeUnreachable && taint.Effect == v1.TaintEffectNoExecute {
					return !nodeReady(n), nil
				}
			}
			return false, fmt.Errorf("Ready %v, taints %v", nodeReady(n), n.Spec.Taints)
		})
		Eventually(t, time.Minute, "the pods of "+gone.Node+" evicted", func() (bool, error) {
			for _, was := range byNode[gone.Node] {
				p, err := cp.Admin.CoreV1().Pods(ns).Get(ctx, was.Name, metav1.GetOptions{})
				if err == nil && p.DeletionTimestamp == nil {
					return false, fmt.Errorf("pod %s on %s not deleted", p.Name, gone.Node)
				}
				if err != nil && !apierrors.IsNotFound(err) {
					return false, err
				}
			}
			return true, nil
		})
		Eventually(t, 30*time.Second, "a TaintManagerEviction event for each pod of "+gone.Node, func() (bool, error) {
			evs, err := cp.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=TaintManagerEviction"})
			if err != nil {
				return false, err
			}
			evicted := map[string]bool{}
			for _, e := range evs.Items {
				evicted[e.InvolvedObject.Name] = true
			}
			for _, p := range byNode[gone.Node] {
				if !evicted[p.Name] {
					return false, fmt.Errorf("none for %s", p.Name)
				}
			}
			return true, nil
		})
		after := waitReplicas(t, cp, ns, "app=web", 6, 2*time.Minute)
		if len(after[gone.Node]) != 0 || len(after[nodes[0]]) != 3 || len(after[nodes[1]]) != 3 {
			t.Errorf("replicas after %s stopped: %s; want 3 on each of the other two", gone.Node, podsPerNode(after))
		}
	})
	t.Logf("multi-node test took %v before clean-up", time.Since(started).Round(time.Second))
}

func nodeAddress(n *v1.Node, kind v1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == kind {
			return a.Address
		}
	}
	return ""
}

// spreadDeployment serves its pod's name over HTTP on 8080 (busybox httpd),
// one replica per node in turn (topology spread on the host name, tainted
// nodes left out), and leaves an unreachable or not-ready node 5 s after
// the taint.
func spreadDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	leave := func(taint string) v1.Toleration {
		return v1.Toleration{Key: taint, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []v1.Container{{
						Name: "web", Image: images.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
						Command: []string{"sh", "-c", `mkdir -p /www && hostname > /www/index.html && echo serving $(hostname) && exec httpd -f -p 8080 -h /www`},
						Ports:   []v1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &v1.Probe{PeriodSeconds: 1,
							ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
					}},
					Tolerations: []v1.Toleration{leave(v1.TaintNodeUnreachable), leave(v1.TaintNodeNotReady)},
					TopologySpreadConstraints: []v1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: v1.LabelHostname, WhenUnsatisfiable: v1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
						// A stopped node keeps its NoSchedule taint and has no
						// replicas left: counting it would forbid every placement.
						NodeTaintsPolicy: ptr.To(v1.NodeInclusionPolicyHonor),
					}},
				},
			},
		},
	}
}

// waitReplicas waits until exactly n pods of the selector are Ready and not
// being deleted; it returns them by node.
func waitReplicas(t *testing.T, cp *Podvisor, ns, selector string, n int, timeout time.Duration) map[string][]v1.Pod {
	t.Helper()
	var byNode map[string][]v1.Pod
	Eventually(t, timeout, fmt.Sprintf("%d Ready replicas of %s", n, selector), func() (bool, error) {
		pods, err := cp.Admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		byNode = map[string][]v1.Pod{}
		ready := 0
		var notReady []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if !isReady(&p) {
				notReady = append(notReady, fmt.Sprintf("%s on %q: %s", p.Name, p.Spec.NodeName, describe(&p)))
				continue
			}
			ready++
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
		return ready == n && len(notReady) == 0, fmt.Errorf("%d Ready (%s); not Ready: %s", ready, podsPerNode(byNode), strings.Join(notReady, "; "))
	})
	return byNode
}

func podsPerNode(byNode map[string][]v1.Pod) string {
	var s []string
	for node, pods := range byNode {
		s = append(s, fmt.Sprintf("%s: %d", node, len(pods)))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// poll is Eventually for checks that report rather than stop the test.
func poll(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// runInMachine runs `podvisor agent ARGS` in machine i to completion, for
// agents that must exit; it kills them after timeout (a failure).
func runInMachine(t *testing.T, lab *netLab, i int, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := lab.agentCommand(i, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		terminate(cmd, exited)
		if dir := flagValue(args, "--data-dir"); dir != "" {
			killLeftovers(dir)
			removeContainerdState(dir)
		}
	})
	select {
	case <-exited:
	case <-time.After(timeout):
		terminate(cmd, exited)
		t.Errorf("podvisor agent %s still running after %v", strings.Join(args, " "), timeout)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// nodeCredentialsAreRestricted: with node a's credentials, node b cannot be
// changed, a secret is readable only by the node of a pod using it (the
// Node authorizer and NodeRestriction), and no serving certificate is
// issued in node b's name or for its address.
func nodeCredentialsAreRestricted(t *testing.T, cp *Podvisor, ns string, a, b *labAgent) {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", nodeKubeconfig(a.DataDir))
	if err != nil {
		t.Fatalf("node %s's kubeconfig: %v", a.Node, err)
	}
	asA := kubernetes.NewForConfigOrDie(cfg)
	patch := []byte(`{"metadata":{"labels":{"impersonated":"yes"}}}`)
	if _, err := asA.CoreV1().Nodes().Patch(ctx, b.Node, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node %s patching node %s: %v, want Forbidden", a.Node, b.Node, err)
	}
	for _, node := range []string{a.Node, b.Node} {
		name := "secret-of-" + node
		if _, err := cp.Admin.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := cp.pod(ns, "uses-"+name, v1.RestartPolicyAlways, sh("c", "exec sleep 3600"))
		pod.Spec.NodeName = node
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		pod.Spec.Volumes = []v1.Volume{{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: name}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "s", MountPath: "/s"}}
		cp.create(t, pod)
	}
	// The Node authorizer learns of the pods from a watch.
	Eventually(t, 30*time.Second, "node "+a.Node+" reads the secret of its pod", func() (bool, error) {
		_, err := asA.CoreV1().Secrets(ns).Get(ctx, "secret-of-"+a.Node, metav1.GetOptions{})
		return err == nil, err
	})
	if _, err := asA.CoreV1().Secrets(ns).Get(ctx, "secret-of-"+b.Node, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node %s reading the secret of a pod on %s: %v, want Forbidden", a.Node, b.Node, err)
	}

	// Serving certificates: node a gets none in node b's name (the API
	// server forbids the request) or for node b's address (the server's
	// approver denies it).
	for _, c := range []struct {
		name, cn string
		ip       netip.Addr
		want     string
	}{
		{"node-b-name", "system:node:" + b.Node, a.addr, "a node may only ask for CN="},
		{"node-b-address", "system:node:" + a.Node, b.addr, fmt.Sprintf("is not one of node %s's addresses", a.Node)},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), cryptorand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(cryptorand.Reader, &x509.CertificateRequest{
			Subject:     pkix.Name{CommonName: c.cn, Organization: []string{"system:nodes"}},
			IPAddresses: []net.IP{c.ip.AsSlice()},
		}, key)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := asA.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "impersonation-" + c.name + "-"},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				SignerName: certificatesv1.KubeletServingSignerName,
				Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
			},
		}, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			continue // NodeRestriction: refused before any approver sees it
		}
		if err != nil {
			t.Errorf("node %s creating a CSR for %s: %v", a.Node, c.name, err)
			continue
		}
		Eventually(t, 30*time.Second, "CSR "+csr.Name+" denied", func() (bool, error) {
			got, err := cp.Admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, cond := range got.Status.Conditions {
				switch {
				case cond.Type == certificatesv1.CertificateDenied && strings.Contains(cond.Message, c.want):
					return true, nil
				case cond.Type == certificatesv1.CertificateApproved:
					t.Fatalf("CSR %s (%s, by node %s) approved: %s", csr.Name, c.name, a.Node, cond.Message)
				}
			}
			return false, fmt.Errorf("conditions %+v, want Denied with %q", got.Status.Conditions, c.want)
		})
	}
}

// nodeCertificatesFromCSRs: each node's client certificate was requested
// with the bootstrap token and its serving certificate by the node itself,
// both approved and issued; the agent API serves the latter, verified by
// the cluster's CA for the node's address.
func nodeCertificatesFromCSRs(t *testing.T, cp *Podvisor, lab *netLab, nodes []string) {
	issued := func(c certificatesv1.CertificateSigningRequest) bool {
		for _, cond := range c.Status.Conditions {
			if cond.Type == certificatesv1.CertificateApproved {
				return len(c.Status.Certificate) > 0
			}
		}
		return false
	}
	// The agent is ready before its serving certificate is issued (it
	// serves a self-signed one until then).
	Eventually(t, 30*time.Second, "each node's client and serving CSRs approved and issued", func() (bool, error) {
		csrs, err := cp.Admin.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var missing []string
		for _, name := range nodes {
			var client, serving bool
			for _, c := range csrs.Items {
				if !issued(c) {
					continue
				}
				switch {
				case c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && strings.HasPrefix(c.Spec.Username, "system:bootstrap:"):
					if blk, _ := pem.Decode(c.Spec.Request); blk != nil {
						if req, err := x509.ParseCertificateRequest(blk.Bytes); err == nil && req.Subject.CommonName == "system:node:"+name {
							client = true
						}
					}
				case c.Spec.SignerName == certificatesv1.KubeletServingSignerName && c.Spec.Username == "system:node:"+name:
					serving = true
				}
			}
			if !client {
				missing = append(missing, name+": client certificate from a token holder's CSR")
			}
			if !serving {
				missing = append(missing, name+": serving certificate from its own CSR")
			}
		}
		return len(missing) == 0, fmt.Errorf("not issued: %s", strings.Join(missing, "; "))
	})
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cp.AdminCfg.CAData) {
		t.Fatalf("admin kubeconfig: no CA data")
	}
	for i, name := range nodes {
		addr := lab.Hosts[i].Addr.String()
		var last error
		if err := poll(30*time.Second, func() bool {
			conn, err := tls.Dial("tcp", net.JoinHostPort(addr, "10250"), &tls.Config{RootCAs: roots, ServerName: addr})
			if err == nil {
				conn.Close()
			}
			last = err
			return err == nil
		}); err != nil {
			t.Errorf("node %s's agent API at %s:10250, verified with the cluster CA: %v", name, addr, last)
		}
	}
}

// servicesAcrossNodes (issue 26 item 5): each node runs its service proxy
// and cluster DNS, so a pod on any node reaches a Service's pods on every
// node through its ClusterIP and its name, and a NodePort answers on every
// node's address from a machine that runs no node.
func servicesAcrossNodes(t *testing.T, cp *Podvisor, lab *netLab, ns string, nodes []string, byNode map[string][]v1.Pod) {
	t.Helper()
	ctx := context.Background()
	svc, err := cp.Admin.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
			Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Which node each answering pod runs on.
	nodeOf := map[string]string{}
	for node, pods := range byNode {
		for _, p := range pods {
			nodeOf[p.Name] = node
		}
	}
	for i, from := range nodes {
		src := byNode[from][0]
		// The name resolves to the ClusterIP through the node's cluster DNS
		// (busybox's own resolver: its nc, static, cannot look names up).
		name := "web." + ns + ".svc.cluster.local"
		var answer string
		if err := poll(time.Minute, func() bool {
			o, e, _ := cp.kubectl(t, "", nil, "-n", ns, "exec", src.Name, "--", "nslookup", name)
			answer = o + e
			return strings.Contains(o, "Address: "+svc.Spec.ClusterIP)
		}); err != nil {
			t.Errorf("from %s on %s, nslookup %s: %q; want %s", src.Name, from, name, answer, svc.Spec.ClusterIP)
		}
		// Fresh connections to the ClusterIP until pods of every node answered.
		get := fmt.Sprintf(`for i in $(seq 1 30); do printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s 80 | tail -n 1; echo; done`, svc.Spec.ClusterIP)
		seen := map[string]bool{}
		var last string
		err := poll(time.Minute, func() bool {
			o, e, code := cp.kubectl(t, "", nil, "-n", ns, "exec", src.Name, "--", "sh", "-c", get)
			last = fmt.Sprintf("exit %d, stderr %q", code, e)
			for _, line := range strings.Fields(o) {
				if n, ok := nodeOf[line]; ok {
					seen[n] = true
				}
			}
			return len(seen) == len(nodes)
		})
		if err != nil {
			routes, _ := lab.Exec(i, "ip", "route")
			t.Errorf("from %s on %s, %s:80 answered from the pods of nodes %v only, want all of %v (%s)\n%s's routes:\n%s",
				src.Name, from, svc.Spec.ClusterIP, seen, nodes, last, from, routes)
		}
	}
	// Machine 4 runs no node: the NodePort of every node answers it.
	port := svc.Spec.Ports[0].NodePort
	for i, node := range nodes {
		url := fmt.Sprintf("http://%s/", net.JoinHostPort(lab.Hosts[i].Addr.String(), fmt.Sprint(port)))
		var out string
		err := poll(time.Minute, func() bool {
			out, _ = lab.Exec(3, "curl", "-sS", "-m", "3", url)
			_, ok := nodeOf[strings.TrimSpace(out)]
			return ok
		})
		if err != nil {
			t.Errorf("NodePort %s of node %s from machine 4: %q", url, node, out)
		}
	}
}
