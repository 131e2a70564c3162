package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/cluster/ranges"
	"github.com/podvisor/podvisor/internal/cluster/serviceproxy"
	"github.com/podvisor/podvisor/test/servicetraffic"
)

// serviceProxyTest starts a containerd podvisor that runs its service
// proxy, once no other test on this machine runs one, with the service
// CIDR routed to nowhere in the host's namespace (an `unreachable` route: a
// blackhole that answers with ICMP host unreachable): a ClusterIP the proxy
// has no rule for then fails at once instead of leaving by the default
// route. Pods' Service traffic is DNATed in PREROUTING, before the route
// lookup, so the route only catches what the proxy missed. (It would
// also break connections from the host itself to ClusterIPs, whose route is
// looked up before the nat OUTPUT hook: these tests make none.)
func serviceProxyTest(t *testing.T) *Podvisor {
	t.Helper()
	needContainerd(t)
	lockServiceProxy(t)
	if out, err := exec.Command("ip", "route", "replace", "unreachable", ranges.ServiceCIDR).CombinedOutput(); err != nil {
		t.Fatalf("unreachable route for %s: %v: %s", ranges.ServiceCIDR, err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "route", "del", "unreachable", ranges.ServiceCIDR).Run()
	})
	// Runs after the podvisor stops (clean-ups run last first): the proxy
	// leaves its rules, as upstream's does across restarts, and they would
	// DNAT to pod addresses that are gone.
	t.Cleanup(func() {
		for _, family := range []string{"ip", "ip6"} {
			_ = exec.Command("nft", "delete", "table", family, "kube-proxy").Run()
		}
	})
	p := NewContainerdPodvisor(t)
	p.ServiceProxy = true
	p.Start()
	// The log says which backend it chose, and why.
	Eventually(t, time.Minute, "the service proxy's mode in podvisor.log", func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
		return strings.Contains(string(b), `msg="service proxy mode"`), err
	})
	return p
}

func lockServiceProxy(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(servicetraffic.ProxyLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
	Eventually(t, 15*time.Minute, "the service proxy lock (another test runs a proxy)", func() (bool, error) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		return err == nil, err
	})
}

// TestServices: Services route on a podvisor node through its embedded
// kube-proxy: a ClusterIP spreads connections over a Deployment's ready
// pods and stops sending new ones to a pod whose readiness fails; pods
// reach the API server through the kubernetes Service; a NodePort answers
// on the node's address.
func TestServices(t *testing.T) {
	p := serviceProxyTest(t)
	ns := p.Namespace("services")
	ctx := context.Background()

	web := p.testserver(t, "web", "serve", "--port", "8080")
	web.Ports = []v1.ContainerPort{{ContainerPort: 8080}}
	web.ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}
	labels := map[string]string{"app": "web"}
	_, err := p.Admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: v1.PodSpec{Containers: []v1.Container{web}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := p.Admin.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, Selector: labels,
			Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := p.pod(ns, "client", v1.RestartPolicyNever, p.testserver(t, "client", "pause"))
	p.create(t, client)
	p.waitRunning(t, ns, "client")

	var backends []string
	Eventually(t, 3*time.Minute, "3 ready pods of deployment web", func() (bool, error) {
		pods, err := p.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		backends = backends[:0]
		for _, pod := range pods.Items {
			if podReady(&pod) {
				backends = append(backends, pod.Name)
			}
		}
		return len(backends) == 3, nil
	})
	url := fmt.Sprintf("http://%s/hostname", net.JoinHostPort(svc.Spec.ClusterIP, "80"))

	t.Run("ClusterIP reaches every ready pod", func(t *testing.T) {
		seen := map[string]int{}
		Eventually(t, time.Minute, "answers from all of "+strings.Join(backends, ", ")+" through "+url, func() (bool, error) {
			answers, err := p.getFromPod(t, ns, "client", 10, url)
			for _, a := range answers {
				seen[a]++
			}
			for _, b := range backends {
				if seen[b] == 0 {
					return false, fmt.Errorf("answers so far %v (%v)", seen, err)
				}
			}
			return true, nil
		})
		for a := range seen {
			if !slices.Contains(backends, a) {
				t.Errorf("answer %q is from none of the backends %v", a, backends)
			}
		}
	})

	t.Run("a pod failing readiness gets no new connections", func(t *testing.T) {
		out := backends[0]
		if _, errOut, code := p.kubectl(t, "", nil, "exec", "-n", ns, out, "--", "/testserver", "get", "http://127.0.0.1:8080/healthz/fail"); code != 0 {
			t.Fatalf("exec into %s: exit %d: %s", out, code, errOut)
		}
		p.waitEndpointReady(t, ns, "web", out, false)
		// The proxy follows the EndpointSlice within its sync period: wait
		// for a batch without the pod, then require another batch.
		Eventually(t, time.Minute, "a batch of answers without "+out, func() (bool, error) {
			answers, err := p.getFromPod(t, ns, "client", 10, url)
			return len(answers) == 10 && !slices.Contains(answers, out), fmt.Errorf("answers %v (%v)", answers, err)
		})
		answers, err := p.getFromPod(t, ns, "client", 30, url)
		if err != nil || len(answers) != 30 {
			t.Fatalf("after the proxy dropped %s: %d of 30 requests answered (%v): %v", out, len(answers), err, answers)
		}
		if slices.Contains(answers, out) {
			t.Fatalf("%s, not ready, still got new connections: %v", out, answers)
		}

		if _, errOut, code := p.kubectl(t, "", nil, "exec", "-n", ns, out, "--", "/testserver", "get", "http://127.0.0.1:8080/healthz/ok"); code != 0 {
			t.Fatalf("exec into %s: exit %d: %s", out, code, errOut)
		}
		p.waitEndpointReady(t, ns, "web", out, true)
		Eventually(t, time.Minute, out+" answering again once ready", func() (bool, error) {
			answers, err := p.getFromPod(t, ns, "client", 10, url)
			return slices.Contains(answers, out), fmt.Errorf("answers %v (%v)", answers, err)
		})
	})

	t.Run("a Service selecting nothing is rejected at once", func(t *testing.T) {
		// Bad input, not an error to the API: upstream's proxy rejects new
		// connections to a Service without endpoints (no timeout, nothing
		// sent on), and the node is not affected.
		empty, err := p.Admin.CoreV1().Services(ns).Create(ctx, &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "selects-nothing"},
			Spec: v1.ServiceSpec{Selector: map[string]string{"app": "no-such-app"},
				Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		log, err := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
		if err != nil {
			t.Fatal(err)
		}
		// Where each backend rejects a Service without endpoints.
		list, want := []string{"nft", "list", "map", "ip", "kube-proxy", "no-endpoint-services"}, empty.Spec.ClusterIP+" . tcp . 80"
		if servicetraffic.ModeFromLog(string(log)) != serviceproxy.NFTables {
			list, want = []string{"iptables", "-t", "filter", "-S", "KUBE-SERVICES"}, "-d "+empty.Spec.ClusterIP+"/32"
		}
		Eventually(t, time.Minute, "a rule rejecting "+empty.Spec.ClusterIP+" in "+strings.Join(list, " "), func() (bool, error) {
			out, err := exec.Command(list[0], list[1:]...).Output()
			return strings.Contains(string(out), want), err
		})
		// The client sees the rejection at once; in this harness the
		// service CIDR's unreachable route answers first (no route to
		// host), on a node without it the proxy's reject (refused).
		emptyURL := fmt.Sprintf("http://%s/hostname", net.JoinHostPort(empty.Spec.ClusterIP, "80"))
		out, _, _ := p.kubectl(t, "", nil, "exec", "-n", ns, "client", "--", "/testserver", "get", emptyURL)
		if !strings.Contains(out, "connection refused") && !strings.Contains(out, "no route to host") {
			t.Errorf("GET %s from a pod: %q; want it refused at once", emptyURL, out)
		}
		node, err := p.Admin.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{})
		if err != nil || !nodeReady(node) {
			t.Fatalf("node not Ready: %v %v", err, node)
		}
		// The Deployment's Service still answers.
		if answers, err := p.getFromPod(t, ns, "client", 3, url); len(answers) != 3 {
			t.Fatalf("web after the empty Service: %v (%v)", answers, err)
		}
	})

	t.Run("readiness failure to endpoint removal to proxy rules, measured", func(t *testing.T) {
		readinessToRules(t, p, ns, "web", backends[1])
	})

	t.Run("pods reach the API server through the kubernetes Service", func(t *testing.T) {
		kube, err := p.Admin.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		env, errOut, code := p.kubectl(t, "", nil, "exec", "-n", ns, "client", "--", "/testserver", "entrypoint-tester")
		if code != 0 {
			t.Fatalf("entrypoint-tester: exit %d: %s", code, errOut)
		}
		host, port := envValue(env, "KUBERNETES_SERVICE_HOST"), envValue(env, "KUBERNETES_SERVICE_PORT")
		if host != kube.Spec.ClusterIP || port != "443" {
			t.Fatalf("KUBERNETES_SERVICE_HOST:PORT = %s:%s, want %s:443", host, port, kube.Spec.ClusterIP)
		}
		const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
		apiURL := "https://" + net.JoinHostPort(host, port) + "/version"
		var last string
		Eventually(t, time.Minute, "an answer from "+apiURL, func() (bool, error) {
			out, errOut, _ := p.kubectl(t, "", nil, "exec", "-n", ns, "client", "--", "/testserver", "get",
				"--token-file", sa+"token", "--ca-file", sa+"ca.crt", apiURL)
			last = strings.TrimSpace(out)
			return strings.HasPrefix(last, "200 ") && strings.Contains(last, `"gitVersion"`), fmt.Errorf("%s %s", last, errOut)
		})
		t.Logf("from the pod: %s", last)
	})

	t.Run("NodePort answers on the node's address", func(t *testing.T) {
		node, err := p.Admin.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var nodeIP string
		for _, a := range node.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				nodeIP = a.Address
			}
		}
		if nodeIP == "" {
			t.Skip("the node has no InternalIP (no default route)")
		}
		addr := net.JoinHostPort(nodeIP, fmt.Sprint(svc.Spec.Ports[0].NodePort))
		Eventually(t, time.Minute, "an answer from a backend on "+addr, func() (bool, error) {
			body, err := httpGet("http://" + addr + "/hostname")
			return slices.Contains(backends, body), fmt.Errorf("%q (%v)", body, err)
		})
	})

	t.Run("rules outlive podvisor until reset", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
		if err != nil {
			t.Fatal(err)
		}
		// Where each backend keeps its rules.
		list := []string{"nft", "list", "table", "ip", "kube-proxy"}
		if !strings.Contains(string(b), "mode=nftables") {
			list = []string{"iptables", "-t", "nat", "-S", "KUBE-SERVICES"}
		}
		rules := func() error { return exec.Command(list[0], list[1:]...).Run() }
		p.Stop()
		if err := rules(); err != nil {
			t.Fatalf("after podvisor stopped, %v: %v; want the rules kept for the pods that keep running", list, err)
		}
		out, err := exec.Command(binary, "reset", "--data-dir", p.DataDir).CombinedOutput()
		if err != nil {
			t.Fatalf("podvisor reset: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "the service proxy's rules are kept") {
			// Right: other tests' podvisors run on this machine (without a
			// proxy, but reset cannot know), and it kept them.
			t.Skipf("reset kept the rules for the other podvisors of this machine: %s", out)
		}
		if err := rules(); err == nil {
			t.Fatalf("after podvisor reset, %v still lists the proxy's rules", list)
		}
	})
}

// getFromPod runs `testserver get --count n url` in pod and returns the
// bodies of the answers; err says what failed.
func (p *Podvisor) getFromPod(t *testing.T, ns, pod string, n int, url string) ([]string, error) {
	t.Helper()
	out, errOut, code := p.kubectl(t, "", nil, "exec", "-n", ns, pod, "--", "/testserver", "get", "--count", fmt.Sprint(n), url)
	var bodies []string
	var failures []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if body, ok := strings.CutPrefix(line, "200 "); ok {
			bodies = append(bodies, body)
		} else if line != "" {
			failures = append(failures, line)
		}
	}
	if code != 0 || len(failures) > 0 {
		return bodies, fmt.Errorf("exit %d: %s %s", code, strings.Join(failures, "; "), strings.TrimSpace(errOut))
	}
	return bodies, nil
}

// waitEndpointReady waits until the Service's EndpointSlices show pod with
// the given readiness.
func (p *Podvisor) waitEndpointReady(t *testing.T, ns, service, pod string, ready bool) {
	t.Helper()
	Eventually(t, time.Minute, fmt.Sprintf("endpoint %s ready=%v in service %s", pod, ready, service), func() (bool, error) {
		c, err := servicetraffic.EndpointConditions(context.Background(), p.Admin, ns, service, pod)
		return c != nil && ptr.Deref(c.Ready, false) == ready, err
	})
}

func podReady(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// envValue is NAME's value in entrypoint-tester's output ("env NAME=VALUE" lines).
func envValue(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "env "+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestServiceProxyWithoutBackend: a node whose kernel tools the proxy
// cannot use (neither nft nor iptables on PATH) says so in one log line and
// a Warning Event on the Node, and stays Ready.
func TestServiceProxyWithoutBackend(t *testing.T) {
	// It should program nothing; the lock makes sure that, if it did, it
	// would not fight another test's proxy.
	lockServiceProxy(t)
	p := NewPodvisor(t)
	p.Runtime = "process" // the containerd runtime's pod network needs iptables
	p.ServiceProxy = true
	p.Env = []string{"PATH=" + t.TempDir()}
	p.Start()
	Eventually(t, time.Minute, "the service proxy's error in podvisor.log", func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
		return strings.Contains(string(b), `level=ERROR msg="service proxy not started: Service IPs do not route on this node" component=service-proxy err="no usable service proxy backend: nftables unusable (no nft command on PATH) and no iptables command on PATH"`), err
	})
	// And on the Node, for `kubectl get events`.
	Eventually(t, time.Minute, "a "+serviceproxy.FailedReason+" event on the Node", func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + serviceproxy.FailedReason})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == p.NodeName && e.Type == v1.EventTypeWarning &&
				strings.Contains(e.Message, "no iptables command on PATH") {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d such events", len(evs.Items))
	})
	node, err := p.Admin.CoreV1().Nodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !nodeReady(node) {
		t.Errorf("node %s is not Ready after the service proxy failed: %+v", p.NodeName, node.Status.Conditions)
	}
}

// readinessToRules measures, over a few flips of pod's readiness (its
// testserver's /healthz made to fail, then to pass again), how long after
// the failure began the Service's EndpointSlice shows the pod not ready,
// and how long until the node's proxy rules no longer send it new
// connections (issue 26 item 4). The figures are logged, not asserted: they
// are the probe period, the endpoint controller and the proxy's sync on
// this machine (BenchmarkServiceReadinessUnroute measures more flips).
// PODVISOR_E2E_READINESS_TRIALS sets the number of flips (3).
func readinessToRules(t *testing.T, p *Podvisor, ns, service, pod string) {
	trials := 3
	if n, err := strconv.Atoi(os.Getenv("PODVISOR_E2E_READINESS_TRIALS")); err == nil && n > 0 {
		trials = n
	}
	log, err := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
	if err != nil {
		t.Fatal(err)
	}
	po, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	backend := servicetraffic.Backend{Client: p.Admin, Mode: servicetraffic.ModeFromLog(string(log)),
		Namespace: ns, Service: service, Pod: pod, IP: netip.MustParseAddr(po.Status.PodIP),
		SetHealth: func(what string) error {
			if _, errOut, code := p.kubectl(t, "", nil, "exec", "-n", ns, pod, "--", "/testserver", "get", "http://127.0.0.1:8080/healthz/"+what); code != 0 {
				return fmt.Errorf("exec into %s: exit %d: %s", pod, code, errOut)
			}
			return nil
		}}
	var toSlice, toRules []time.Duration
	for range trials {
		flip, err := backend.FlipOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		toSlice = append(toSlice, flip.ToSlice)
		toRules = append(toRules, flip.ToRules)
	}
	slices.Sort(toSlice)
	slices.Sort(toRules)
	t.Logf("readiness failing → EndpointSlice not ready: %v; → %s rules no longer routing: %v (probe period 1 s, %d flips)",
		toSlice, backend.Mode, toRules, trials)
}
