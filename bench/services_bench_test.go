package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
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

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/cluster/ranges"
	"github.com/podvisor/podvisor/test/images"
	"github.com/podvisor/podvisor/test/servicetraffic"
)

// serviceNode starts a containerd podvisor that runs its service proxy and
// cluster DNS, once no test or benchmark of this machine runs a proxy (the
// e2e tests' lock), with the service CIDR routed to nowhere in the host's
// namespace as the e2e tests do: a ClusterIP without a rule then fails at
// once instead of leaving by the default route.
func serviceNode(b *testing.B) *node {
	b.Helper()
	if os.Getenv(runtimeEnv) != "containerd" {
		b.Skipf("Services need the containerd runtime's pod network: set %s=containerd", runtimeEnv)
	}
	f, err := os.OpenFile(servicetraffic.ProxyLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() }) // closing releases the lock; runs last
	eventually(b, 15*time.Minute, "the service proxy lock (a test runs a proxy)", func() (bool, error) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		return err == nil, err
	})
	if out, err := exec.Command("ip", "route", "replace", "unreachable", ranges.ServiceCIDR).CombinedOutput(); err != nil {
		b.Fatalf("unreachable route for %s: %v: %s", ranges.ServiceCIDR, err, out)
	}
	b.Cleanup(func() { _ = exec.Command("ip", "route", "del", "unreachable", ranges.ServiceCIDR).Run() })
	// Runs after the node stopped: the proxy leaves its rules, as
	// upstream's does across restarts.
	b.Cleanup(func() {
		for _, family := range []string{"ip", "ip6"} {
			_ = exec.Command("nft", "delete", "table", family, "kube-proxy").Run()
		}
	})
	n := newNode(b)
	if !serviceFlags {
		b.Skipf("%s runs no service proxy", n.binary)
	}
	n.services = true
	n.start()
	eventually(b, time.Minute, "the service proxy's mode in the log", func() (bool, error) {
		return strings.Contains(n.log(), `msg="service proxy mode"`), nil
	})
	return n
}

func (n *node) proxyMode() string { return string(servicetraffic.ModeFromLog(n.log())) }

// log is the node's log file (its components' logs go there, not to stderr).
func (n *node) log() string {
	b, _ := os.ReadFile(filepath.Join(n.dataDir, "podvisor.log"))
	return string(b)
}

// eventually polls cond every 100 ms until it holds, failing the benchmark
// after timeout.
func eventually(b *testing.B, timeout time.Duration, what string, cond func() (bool, error)) {
	b.Helper()
	var last error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
	}
	b.Fatalf("timed out after %v waiting for %s (last error: %v)", timeout, what, last)
}

// testserverContainer runs the testserver image with args.
func testserverContainer(name string, args ...string) v1.Container {
	return v1.Container{Name: name, Image: images.TestserverImage, ImagePullPolicy: v1.PullIfNotPresent, Args: args}
}

// webBehindService creates a Deployment of 3 testservers on port 8080,
// ready while /healthz passes (probed every second), with a 5 s preStop
// sleep if preStop, and a ClusterIP Service on port 80 for them; it waits
// until the rollout is complete and returns the Service's URL for
// /hostname.
func (n *node) webBehindService(ns string, preStop bool) string {
	b := n.b
	b.Helper()
	ctx := context.Background()
	web := testserverContainer("web", "serve", "--port", "8080")
	web.Ports = []v1.ContainerPort{{ContainerPort: 8080}}
	web.ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}
	if preStop {
		web.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}}}
	}
	labels := map[string]string{"app": "web"}
	if _, err := n.client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: v1.PodSpec{Containers: []v1.Container{web}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	svc, err := n.client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       v1.ServiceSpec{Selector: labels, Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	n.waitRolledOut(ns, "web")
	return fmt.Sprintf("http://%s/hostname", net.JoinHostPort(svc.Spec.ClusterIP, "80"))
}

func (n *node) waitRolledOut(ns, name string) {
	n.b.Helper()
	eventually(n.b, 5*time.Minute, "deployment "+name+" rolled out", func() (bool, error) {
		return servicetraffic.RolledOut(context.Background(), n.client, ns, name)
	})
}

// kubectl runs the embedded kubectl against the node.
func (n *node) kubectl(args ...string) *exec.Cmd {
	return exec.Command(n.binary, append([]string{"kubectl", "--kubeconfig", filepath.Join(n.dataDir, "admin.kubeconfig")}, args...)...)
}

// envInt is the environment's name as a positive number, def without one.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkServiceReadinessUnroute: a pod of a 3-replica Deployment behind
// a Service starts failing its readiness probe (period 1 s, threshold 1):
// how long until the Service's EndpointSlice shows it not ready, and until
// this node's proxy rules send it no new connection (issue 26 item 4). Its
// /healthz is flipped from the host, straight to the pod's address;
// PODVISOR_BENCH_FLIPS sets the number of flips (10).
func BenchmarkServiceReadinessUnroute(b *testing.B) {
	n := serviceNode(b)
	ns := n.namespace("unroute")
	ctx := context.Background()
	n.webBehindService(ns, false)
	pods, err := n.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(pods.Items) == 0 {
		b.Fatalf("no pod of web: %v", err)
	}
	pod := pods.Items[0]
	backend := servicetraffic.Backend{Client: n.client, Mode: servicetraffic.ModeFromLog(n.log()),
		Namespace: ns, Service: "web", Pod: pod.Name, IP: netip.MustParseAddr(pod.Status.PodIP),
		SetHealth: func(what string) error {
			resp, err := http.Get("http://" + net.JoinHostPort(pod.Status.PodIP, "8080") + "/healthz/" + what)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}}
	flips := envInt("PODVISOR_BENCH_FLIPS", 10)
	var toSlice, toRules []time.Duration
	for range flips {
		flip, err := backend.FlipOnce(ctx)
		if err != nil {
			b.Fatal(err)
		}
		toSlice = append(toSlice, flip.ToSlice)
		toRules = append(toRules, flip.ToRules)
	}
	s, r := newDist(toSlice), newDist(toRules)
	report(b,
		fmt.Sprintf("%d flips, proxy mode %s, readiness probe period 1 s", flips, backend.Mode),
		"| from the probe failing to | p50 | p99 | min | max |",
		"| --- | --- | --- | --- | --- |",
		fmt.Sprintf("| EndpointSlice shows the pod not ready | %v | %v | %v | %v |", round(s.q(0.5)), round(s.q(0.99)), round(s.min()), round(s.max())),
		fmt.Sprintf("| this node's proxy rules no longer route to it | %v | %v | %v | %v |", round(r.q(0.5)), round(r.q(0.99)), round(r.min()), round(r.max())))
	b.ReportMetric(ms(s.q(0.5)), "slice-p50-ms")
	b.ReportMetric(ms(r.q(0.5)), "rules-p50-ms")
	b.ReportMetric(ms(r.q(0.99)), "rules-p99-ms")
}

// BenchmarkServiceRollout: requests lost per `kubectl rollout restart` of a
// 3-replica Deployment under a constant load (PODVISOR_BENCH_RATE, 200
// requests a second, each on a new connection) from a client pod through
// the Service, in three variants: a 5 s preStop sleep, none, and none with
// the podvisor.io/stop-after-unrouted annotation.
func BenchmarkServiceRollout(b *testing.B) {
	n := serviceNode(b)
	ns := n.namespace("rollout")
	ctx := context.Background()
	url := n.webBehindService(ns, true)
	client := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: ns},
		Spec: v1.PodSpec{Containers: []v1.Container{testserverContainer("client", "pause")}}}
	if _, err := n.client.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	eventually(b, 3*time.Minute, "3 answers through "+url+" from the client pod", func() (bool, error) {
		out, err := n.kubectl("exec", "-n", ns, "client", "--", "/testserver", "get", "--count", "3", url).CombinedOutput()
		return strings.Count(string(out), "200 ") == 3, fmt.Errorf("%v: %s", err, out)
	})
	rate := envInt("PODVISOR_BENCH_RATE", 200)
	variants := []struct {
		name   string
		change func(*appsv1.Deployment)
	}{
		{"preStop sleep 5 s", nil},
		{"no preStop", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Lifecycle = nil }},
		{"no preStop, " + lifecycle.StopAfterUnroutedAnnotation, func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{lifecycle.StopAfterUnroutedAnnotation: "true"}
		}},
	}
	lines := []string{fmt.Sprintf("load %d requests/s, proxy mode %s", rate, n.proxyMode()),
		"| variant | sent | answered | cut (refused/reset/other) | timed out | load ran |", "| --- | --- | --- | --- | --- | --- |"}
	for _, v := range variants {
		if v.change != nil {
			d, err := n.client.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			v.change(d)
			if _, err := n.client.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
			n.waitRolledOut(ns, "web")
		}
		load, err := servicetraffic.StartLoad(n.kubectl(append([]string{"exec", "-i", "-n", ns, "client", "--"},
			servicetraffic.LoadCommand(rate, url)...)...), rate)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if out, err := n.kubectl("rollout", "restart", "-n", ns, "deployment/web").CombinedOutput(); err != nil {
			load.Kill()
			b.Fatalf("kubectl rollout restart: %v: %s", err, out)
		}
		n.waitRolledOut(ns, "web")
		time.Sleep(2 * time.Second)
		r, err := load.Stop()
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("| %s | %d | %d | %d (%d/%d/%d) | %d | %v |", v.name, r.Sent, r.Answered,
			r.Cut(), r.Refused, r.Reset, r.Other, r.Timeout, r.Took.Round(time.Second)))
		for i, s := range r.Samples {
			if i == 5 {
				break
			}
			lines = append(lines, "    "+s)
		}
	}
	report(b, lines...)
}
