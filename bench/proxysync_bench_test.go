package bench

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/cluster/serviceproxy"
)

// The hand-made endpoints live in 198.18.0.0/15 (set aside for
// benchmarks, RFC 2544): no pod has such an address, so counting them in
// the proxy's rules counts exactly this benchmark's endpoints. No packet is
// sent to them.
var benchEndpoint = regexp.MustCompile(`\b198\.1[89]\.\d{1,3}\.\d{1,3}\b`)

func endpointAddr(i int) string { return fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250) }

// routedEndpoints counts the distinct benchmark endpoints in the listing
// of the proxy's rules (nftables table or iptables nat table).
func routedEndpoints(mode serviceproxy.Mode) (int, error) {
	cmd := []string{"iptables-save", "-t", "nat"}
	if mode == serviceproxy.NFTables {
		cmd = []string{"nft", "list", "table", "ip", "kube-proxy"}
	}
	out, err := exec.Command(cmd[0], cmd[1:]...).Output()
	if err != nil {
		return 0, fmt.Errorf("%v: %w", cmd, err)
	}
	seen := map[string]bool{}
	for _, m := range benchEndpoint.FindAll(out, -1) {
		seen[string(m)] = true
	}
	return len(seen), nil
}

// createSelectorless creates Service name (ClusterIP, port 80 → 8080, no
// selector) and one EndpointSlice for it with the given endpoints, ready,
// as a controller of the user's own would.
func (n *node) createSelectorless(ctx context.Context, ns, name string, addrs []string) error {
	if _, err := n.client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bench", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "bench.podvisor.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for _, a := range addrs {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	_, err := n.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	return err
}

// BenchmarkServiceProxySync: 1,000 Services of 5 endpoints each
// (PODVISOR_BENCH_SERVICES, PODVISOR_BENCH_ENDPOINTS), made through the API
// with EndpointSlices by hand (no pods): how long until this node's proxy
// rules hold every endpoint, and how much more memory the podvisor process
// (the proxy and the control plane that stores and serves them) holds then.
// Then, at that size, how long one more Service takes to reach the rules.
func BenchmarkServiceProxySync(b *testing.B) {
	n := serviceNode(b)
	ns := n.namespace("many")
	ctx := context.Background()
	mode := serviceproxy.Mode(n.proxyMode())
	services, per := envInt("PODVISOR_BENCH_SERVICES", 1000), envInt("PODVISOR_BENCH_ENDPOINTS", 5)
	time.Sleep(10 * time.Second) // let start-up settle before the memory baseline
	before, err := memOf(n.pid())
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	work := make(chan int)
	errs := make(chan error, services)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				addrs := make([]string, per)
				for j := range addrs {
					addrs[j] = endpointAddr(i*per + j)
				}
				if err := n.createSelectorless(ctx, ns, fmt.Sprintf("s%04d", i), addrs); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range services {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	created := time.Since(start)
	want := services * per
	var last int
	eventually(b, 10*time.Minute, fmt.Sprintf("%d endpoints in the %s rules", want, mode), func() (bool, error) {
		got, err := routedEndpoints(mode)
		last = got
		return got == want, fmt.Errorf("%d (%v)", got, err)
	})
	synced := time.Since(start)
	after, err := memOf(n.pid())
	if err != nil {
		b.Fatal(err)
	}
	// One more Service at this size, a few times: the proxy's sync of a
	// single change when it holds them all.
	var one []time.Duration
	for k := range 5 {
		i := services + k
		t0 := time.Now()
		addrs := []string{endpointAddr(i * per)}
		if err := n.createSelectorless(ctx, ns, fmt.Sprintf("s%04d", i), addrs); err != nil {
			b.Fatal(err)
		}
		want++
		eventually(b, 5*time.Minute, "one more endpoint in the rules", func() (bool, error) {
			got, err := routedEndpoints(mode)
			return got == want, fmt.Errorf("%d (%v)", got, err)
		})
		one = append(one, time.Since(t0))
	}
	o := newDist(one)
	report(b,
		fmt.Sprintf("%d Services × %d endpoints (%d endpoints), proxy mode %s", services, per, services*per, mode),
		fmt.Sprintf("created through the API in %v; every endpoint in the rules %v after the first create (%v after the last); %d counted", round(created), round(synced), round(synced-created), last),
		fmt.Sprintf("podvisor process memory: VmRSS %.0f → %.0f MiB (+%.0f), Pss %.0f → %.0f MiB (+%.0f), anon %.0f → %.0f MiB (+%.0f)",
			mib(before.rss), mib(after.rss), mib(after.rss-before.rss), mib(before.pss), mib(after.pss), mib(after.pss-before.pss),
			mib(before.anon), mib(after.anon), mib(after.anon-before.anon)),
		fmt.Sprintf("one more Service at that size → in the rules: p50 %v, max %v (5 tries)", round(o.q(0.5)), round(o.max())))
	b.ReportMetric(synced.Seconds(), "sync-s")
	b.ReportMetric(mib(after.rss-before.rss), "rss-delta-MiB")
}
