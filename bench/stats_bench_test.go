package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	statsPods    = 100
	statsScrapes = 40
)

// BenchmarkStats (issue 28): what the node's stats collection costs with
// 100 pods running. First the podvisor process's CPU and memory over a
// window in which the embedded metrics-server scrapes the agent as it does
// by default (every 15 s); then, one after another, scrapes of the agent's
// /stats/summary and /metrics/resource as an in-cluster Prometheus or
// metrics-server makes them (client certificate of the admin kubeconfig,
// straight to the agent port): latency per scrape and the process's CPU per
// scrape (the agent's work plus the API server's authorization check, which
// runs in the same process on `up`), and what the scrapes leave in memory.
func BenchmarkStats(b *testing.B) {
	n := newNode(b)
	n.start()
	ns := n.namespace("bench")
	pods := make([]*v1.Pod, statsPods)
	for i := range pods {
		pods[i] = n.shPod(ns, fmt.Sprintf("sleep-%03d", i), v1.RestartPolicyAlways, "sleep 3600")
	}
	n.startRunning(pods)
	client, base := n.agentAPI()

	// Idle with the pods running: metrics-server's scrapes only.
	time.Sleep(settleTime)
	pid := n.pid()
	idlePct, _, idleWindow := cpuOver(b, pid, cpuWindow)
	before, _ := memOf(pid)

	type result struct {
		path    string
		latency dist
		cpu     time.Duration // podvisor's CPU per scrape
		runtime time.Duration // containerd's and the shims' CPU per scrape
		bytes   int
	}
	var results []result
	b.ResetTimer()
	for _, path := range []string{"/stats/summary", "/metrics/resource"} {
		// One scrape first: the authorization cache and the pod figures
		// warm up, and its answer is checked.
		body := n.scrape(client, base+path)
		if path == "/stats/summary" && strings.Count(body, `"podRef"`) < statsPods {
			b.Fatalf("%s lists %d pods, want %d", path, strings.Count(body, `"podRef"`), statsPods)
		}
		if path == "/metrics/resource" && strings.Count(body, "\ncontainer_cpu_usage_seconds_total{") < statsPods {
			b.Fatalf("%s has %d container CPU samples, want ≥ %d", path, strings.Count(body, "\ncontainer_cpu_usage_seconds_total{"), statsPods)
		}
		var lat []time.Duration
		c0, _ := cpuTime(pid)
		st0 := n.stack()
		for range statsScrapes {
			s := time.Now()
			n.scrape(client, base+path)
			lat = append(lat, time.Since(s))
		}
		c1, _ := cpuTime(pid)
		st1 := n.stack()
		rt := (st1.containerd.cpu + st1.shims.cpu) - (st0.containerd.cpu + st0.shims.cpu)
		results = append(results, result{path, newDist(lat), (c1 - c0) / statsScrapes, rt / statsScrapes, len(body)})
	}
	b.StopTimer()
	after, _ := memOf(pid)

	lines := []string{
		fmt.Sprintf("%d pods running; podvisor up over %v with only metrics-server scraping (every 15 s): %.1f %% of one core, VmRSS %.1f MiB, RssAnon %.1f MiB",
			statsPods, idleWindow.Round(time.Second), idlePct, mib(before.rss), mib(before.anon)),
		fmt.Sprintf("%d scrapes of each endpoint, one at a time:", statsScrapes),
		"| endpoint | answer | p50 | p90 | max | podvisor CPU per scrape | containerd + shims CPU per scrape |",
		"| --- | --- | --- | --- | --- | --- | --- |",
	}
	b.ReportMetric(idlePct, "idle-cpu-%")
	b.ReportMetric(mib(before.rss), "rss-MiB")
	for _, r := range results {
		lines = append(lines, fmt.Sprintf("| %s | %.0f KiB | %v | %v | %v | %v | %v |", r.path, float64(r.bytes)/1024,
			round(r.latency.q(0.5)), round(r.latency.q(0.9)), round(r.latency.max()), round(r.cpu), round(r.runtime)))
		unit := strings.ReplaceAll(strings.TrimPrefix(r.path, "/"), "/", "-")
		b.ReportMetric(ms(r.latency.q(0.5)), unit+"-p50-ms")
		b.ReportMetric(ms(r.cpu), unit+"-cpu-ms")
		b.ReportMetric(ms(r.runtime), unit+"-runtime-cpu-ms")
	}
	lines = append(lines, fmt.Sprintf("after the scrapes: VmRSS %.1f MiB (%+.1f), RssAnon %.1f MiB (%+.1f)",
		mib(after.rss), mib(after.rss-before.rss), mib(after.anon), mib(after.anon-before.anon)))
	report(b, lines...)
}

// agentAPI is an HTTP client for the node's agent API with the admin
// kubeconfig's client certificate and CA, and the API's base URL (the
// node's InternalIP, which its serving certificate names).
func (n *node) agentAPI() (*http.Client, string) {
	b := n.b
	b.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(n.dataDir, "admin.kubeconfig"))
	if err != nil {
		b.Fatal(err)
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	node, err := n.client.CoreV1().Nodes().Get(context.Background(), "bench-node", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			return &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsConfig}},
				"https://" + net.JoinHostPort(a.Address, fmt.Sprint(n.ports[1]))
		}
	}
	b.Fatalf("node has no InternalIP: %+v", node.Status.Addresses)
	return nil, ""
}

// scrape GETs url and returns the body; anything but 200 fails the benchmark.
func (n *node) scrape(c *http.Client, url string) string {
	b := n.b
	b.Helper()
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d %v %.300q", url, resp.StatusCode, err, body)
	}
	return string(body)
}
