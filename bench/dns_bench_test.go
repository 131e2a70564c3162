package bench

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runToEnd runs a pod of one testserver container with args, waits until
// it ended, and returns its phase and log.
func (n *node) runToEnd(ns, name string, timeout time.Duration, args ...string) (v1.PodPhase, string) {
	b := n.b
	b.Helper()
	ctx := context.Background()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{testserverContainer("c", args...)}}}
	if _, err := n.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var phase v1.PodPhase
	eventually(b, timeout, "pod "+name+" ended", func() (bool, error) {
		p, err := n.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase = p.Status.Phase
		return phase == v1.PodSucceeded || phase == v1.PodFailed, fmt.Errorf("phase %s", phase)
	})
	log, err := n.client.CoreV1().Pods(ns).GetLogs(name, &v1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return phase, string(log)
}

// BenchmarkClusterDNS: queries a second and latency of the node's cluster
// DNS (CoreDNS, in podvisor's process) asked from a pod at the kube-dns
// Service's address, through the service proxy: PODVISOR_BENCH_DNS_CLIENTS
// clients (4), each one UDP query at a time, for 15 s per question — a
// Service's name (NOERROR, an A record) and a name that does not exist in
// the cluster domain (NXDOMAIN). Nothing is forwarded outside the node.
func BenchmarkClusterDNS(b *testing.B) {
	n := serviceNode(b)
	ns := n.namespace("dns")
	ctx := context.Background()
	kubeDNS, err := n.client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	server := net.JoinHostPort(kubeDNS.Spec.ClusterIP, "53")
	// The first answer: the proxy has its rule and CoreDNS its caches.
	for try := 0; ; try++ {
		phase, log := n.runToEnd(ns, fmt.Sprintf("warm-%d", try), 3*time.Minute,
			"dns", server, "kubernetes.default.svc.cluster.local", "A")
		if phase == v1.PodSucceeded && strings.Contains(log, "rcode NOERROR") {
			break
		}
		if try == 10 {
			b.Fatalf("no answer from %s after %d tries: %s", server, try+1, log)
		}
		time.Sleep(3 * time.Second)
	}
	clients := envInt("PODVISOR_BENCH_DNS_CLIENTS", 4)
	lines := []string{fmt.Sprintf("%d clients, each one UDP query at a time, 15 s per question, to %s", clients, server),
		"| question | answer | queries/s | p50 | p99 | max | errors |", "| --- | --- | --- | --- | --- | --- | --- |"}
	for i, q := range []struct{ name, rcode string }{
		{"kubernetes.default.svc.cluster.local", "NOERROR"},
		{"nothere.default.svc.cluster.local", "NXDOMAIN"},
	} {
		phase, log := n.runToEnd(ns, fmt.Sprintf("bench-%d", i), 3*time.Minute, "dns-bench", "--duration", "15s",
			"--concurrency", fmt.Sprint(clients), "--rcode", q.rcode, server, q.name, "A")
		var queries, errs int
		var secs, qps float64
		var p50, p99, max int64
		if _, err := fmt.Sscanf(log, "queries %d errors %d seconds %f qps %f p50 %d p99 %d max %d",
			&queries, &errs, &secs, &qps, &p50, &p99, &max); err != nil || phase != v1.PodSucceeded {
			b.Fatalf("dns-bench: phase %s, %v: %s", phase, err, log)
		}
		us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
		lines = append(lines, fmt.Sprintf("| %s A | %s | %.0f | %v | %v | %v | %d of %d |", q.name, q.rcode, qps,
			round(us(p50)), round(us(p99)), round(us(max)), errs, queries))
		if i == 0 {
			b.ReportMetric(qps, "qps")
			b.ReportMetric(ms(us(p99)), "p99-ms")
		}
	}
	report(b, lines...)
}
