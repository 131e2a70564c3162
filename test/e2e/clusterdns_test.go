package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// fakeResolver is a DNS server the test runs on a loopback address of its
// own, port 53 (resolv.conf names no port), standing in for the node's
// upstream resolvers so that no query leaves the machine. It answers A
// records from its table, NXDOMAIN otherwise, and counts the questions.
type fakeResolver struct {
	addr    string
	queries atomic.Int32
}

func startFakeResolver(t *testing.T, answers map[string]string) *fakeResolver {
	t.Helper()
	var last error
	for range 20 {
		addr := fmt.Sprintf("127.53.%d.%d", 1+rand.IntN(250), 1+rand.IntN(250))
		r := &fakeResolver{addr: addr}
		h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
			r.queries.Add(1)
			m := new(dns.Msg)
			m.SetReply(q)
			name := strings.ToLower(q.Question[0].Name)
			if ip, ok := answers[name]; ok && q.Question[0].Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.ParseIP(ip)})
			} else if !ok {
				m.Rcode = dns.RcodeNameError
			}
			_ = w.WriteMsg(m)
		})
		pc, err := net.ListenPacket("udp", addr+":53")
		if err != nil {
			last = err
			continue
		}
		l, err := net.Listen("tcp", addr+":53")
		if err != nil {
			pc.Close()
			last = err
			continue
		}
		udp, tcp := &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: l, Handler: h}
		go udp.ActivateAndServe()
		go tcp.ActivateAndServe()
		t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown() })
		return r
	}
	t.Fatalf("no loopback address for a fake resolver: %v", last)
	return nil
}

// Cluster DNS on a containerd node: the node's own CoreDNS, asked from a
// pod at the node's address and DNS port (the address kube-dns's
// EndpointSlice names; 10.43.0.10 reaches it through the service proxy).
func TestContainerdClusterDNS(t *testing.T) {
	t.Parallel()
	upstream := startFakeResolver(t, map[string]string{"outside.test.": "192.0.2.99", "elsewhere.test.": "192.0.2.98"})
	stub := startFakeResolver(t, map[string]string{"x.corp.test.": "192.0.2.78"})
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+upstream.addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := NewContainerdPodvisor(t, "--config", kubeletConfig(t, "resolvConf: "+resolv+"\n"))
	p.ClusterDNS = true
	// The node starts with a data-dir fragment that does not parse: there
	// is no last good configuration yet, so it serves the cluster's names
	// without the customizations, says so on the Node, and stays Ready.
	fragments := filepath.Join(p.DataDir, "coredns")
	badFragment := filepath.Join(fragments, "broken.override")
	if err := os.MkdirAll(fragments, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badFragment, []byte("rewrite name {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Start()
	ctx := context.Background()
	ns := p.Namespace("dns")
	waitUntil(t, time.Minute, "an InvalidDNSConfiguration event on the Node", func() (bool, string) {
		evs, err := p.Admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=InvalidDNSConfiguration"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == p.NodeName && strings.Contains(e.Message, "serving without the customizations") {
				return true, e.Message
			}
		}
		return false, fmt.Sprintf("%d such events", len(evs.Items))
	})
	if node, err := p.Admin.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{}); err != nil || !nodeReady(node) {
		t.Fatalf("node %s not Ready with a bad DNS fragment: %v %v", p.NodeName, err, node)
	}

	// The Service, as k3s and kubeadm make it, and this node's endpoint.
	var server string
	deadline := time.Now().Add(time.Minute)
	for {
		svc, err1 := p.Admin.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		slice, err2 := p.Admin.DiscoveryV1().EndpointSlices("kube-system").Get(ctx, "kube-dns-"+p.NodeName, metav1.GetOptions{})
		if err1 == nil && err2 == nil {
			if svc.Spec.ClusterIP != "10.43.0.10" || len(svc.Spec.Ports) != 2 || svc.Spec.Ports[0].Name != "dns" ||
				svc.Spec.Ports[0].Port != 53 || svc.Spec.Ports[0].Protocol != v1.ProtocolUDP || svc.Spec.Ports[1].Name != "dns-tcp" ||
				svc.Spec.Ports[1].Protocol != v1.ProtocolTCP || svc.Spec.InternalTrafficPolicy == nil ||
				*svc.Spec.InternalTrafficPolicy != v1.ServiceInternalTrafficPolicyLocal {
				t.Fatalf("kube-dns Service: %+v", svc.Spec)
			}
			if len(slice.Endpoints) != 1 || len(slice.Endpoints[0].Addresses) != 1 || slice.Ports[0].Port == nil ||
				int(*slice.Ports[0].Port) != p.DNSPort || slice.Endpoints[0].NodeName == nil || *slice.Endpoints[0].NodeName != p.NodeName {
				t.Fatalf("kube-dns EndpointSlice of the node: %+v", slice)
			}
			server = net.JoinHostPort(slice.Endpoints[0].Addresses[0], fmt.Sprint(p.DNSPort))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no kube-dns Service or node EndpointSlice after 1m: %v, %v\nDNS log:\n%s", err1, err2, dnsLog(p))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// The DNS answers on the node's address only.
	hostQuery := func(addr, name string) (*dns.Msg, error) {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, addr)
		return r, err
	}
	waitUntil(t, time.Minute, "the node's DNS answers kubernetes.default", func() (bool, string) {
		r, err := hostQuery(server, "kubernetes.default.svc.cluster.local.")
		if err != nil || len(r.Answer) != 1 {
			return false, fmt.Sprintf("%v %v", r, err)
		}
		return r.Answer[0].(*dns.A).A.String() == "10.43.0.1", r.Answer[0].String()
	})
	if r, err := hostQuery(fmt.Sprintf("127.0.0.1:%d", p.DNSPort), "kubernetes.default.svc.cluster.local."); err == nil {
		t.Errorf("the DNS answers on loopback, not only on the node's address: %v", r)
	}
	// Fixed (here: removed), the fragment's absence is read within 10 s;
	// the ConfigMap's stub zone below needs the whole configuration.
	if err := os.Remove(badFragment); err != nil {
		t.Fatal(err)
	}

	// Two pods behind a Service and a headless Service; web-0 has a
	// hostname and the headless Service as subdomain.
	for _, name := range []string{"web-0", "web-1"} {
		c := p.testserver(t, "c", "serve", "--port", "8080")
		c.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}}
		pod := p.pod(ns, name, v1.RestartPolicyAlways, c)
		pod.Labels = map[string]string{"app": "web"}
		if name == "web-0" {
			pod.Spec.Hostname, pod.Spec.Subdomain = "web-0", "web-headless"
		}
		p.create(t, pod)
	}
	client := p.pod(ns, "client", v1.RestartPolicyAlways, p.testserver(t, "c", "pause"))
	p.create(t, client)
	services := []*v1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: v1.ProtocolTCP}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "web-headless"}, Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"}, ClusterIP: v1.ClusterIPNone,
			Ports: []v1.ServicePort{{Name: "http", Port: 8080, Protocol: v1.ProtocolTCP}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "outside.test"}},
	}
	for _, s := range services {
		if _, err := p.Admin.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// An ExternalName that is not a DNS name never reaches the DNS: the
	// API refuses it, naming the field.
	_, err := p.Admin.CoreV1().Services(ns).Create(ctx, &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "bad-ext"},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "not a name!"}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.externalName") {
		t.Errorf("creating an ExternalName Service of %q: %v; want Invalid on spec.externalName", "not a name!", err)
	}
	web, err := p.Admin.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var podIPs []string
	for _, name := range []string{"web-0", "web-1"} {
		podIPs = append(podIPs, p.waitPod(t, ns, name, 2*time.Minute, "ready", isReady).Status.PodIP)
	}
	sort.Strings(podIPs)
	p.waitRunning(t, ns, "client")

	// ask runs the testserver's DNS client in the client pod until its
	// output has every wanted line (EndpointSlices reach CoreDNS's watch a
	// moment after the pods are ready).
	ask := func(what string, args []string, want ...string) {
		t.Helper()
		waitUntil(t, time.Minute, what, func() (bool, string) {
			out, errOut, _ := p.kubectl(t, "", nil, append([]string{"exec", "-n", ns, "client", "--", "/testserver"}, args...)...)
			for _, w := range want {
				if !strings.Contains("\n"+out, "\n"+w+"\n") {
					return false, out + errOut
				}
			}
			return true, out
		})
	}
	svcName := "web." + ns + ".svc.cluster.local."
	ask("A of a Service is its ClusterIP", []string{"dns", server, svcName, "A"}, "rcode NOERROR", "A "+svcName+" "+web.Spec.ClusterIP)
	ask("a short name resolves through the pod's search path", []string{"dns-lookup", server, "web"}, web.Spec.ClusterIP)
	headless := "web-headless." + ns + ".svc.cluster.local."
	ask("a headless Service's A records are its pods' IPs", []string{"dns", server, headless, "A"},
		"A "+headless+" "+podIPs[0], "A "+headless+" "+podIPs[1])
	ask("SRV of a named port", []string{"dns", server, "_http._tcp." + svcName, "SRV"},
		"SRV _http._tcp."+svcName+" 0 100 80 "+svcName)
	web0 := p.waitPod(t, ns, "web-0", time.Minute, "ready", isReady)
	ask("a pod's hostname.subdomain record", []string{"dns", server, "web-0." + headless, "A"}, "A web-0."+headless+" "+web0.Status.PodIP)
	ask("ExternalName is a CNAME", []string{"dns", server, "ext." + ns + ".svc.cluster.local.", "A"},
		"CNAME ext."+ns+".svc.cluster.local. outside.test.")
	ask("a missing name is NXDOMAIN with the zone's SOA", []string{"dns", server, "missing." + ns + ".svc.cluster.local.", "A"},
		"rcode NXDOMAIN", "SOA cluster.local.")
	ask("the dns-version record", []string{"dns", server, "dns-version.cluster.local.", "TXT"}, "TXT dns-version.cluster.local. 1.1.0")

	// Other names go to the node's resolvers (here the fake one).
	before := upstream.queries.Load()
	// (A name of its own: outside.test is in CoreDNS's cache since the CNAME.)
	ask("a name outside the cluster is forwarded to the node's resolver", []string{"dns", server, "elsewhere.test.", "A"}, "A elsewhere.test. 192.0.2.98")
	if upstream.queries.Load() == before {
		t.Errorf("the node's resolver was not asked")
	}
	ask("corp.test is not a stub zone yet", []string{"dns", server, "x.corp.test.", "A"}, "rcode NXDOMAIN")

	// A stub zone through the coredns-custom ConfigMap, as in k3s.
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns-custom", Namespace: "kube-system"},
		Data: map[string]string{"corp.server": "corp.test {\n    forward . " + stub.addr + "\n}\n"}}
	if cm, err = p.Admin.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ask("a stub zone from coredns-custom", []string{"dns", server, "x.corp.test.", "A"}, "A x.corp.test. 192.0.2.78")

	// A fragment that does not set up: an Event on the ConfigMap, and the
	// last good configuration keeps answering.
	cm.Data["bad.override"] = "no-such-plugin\n"
	if _, err = p.Admin.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "an InvalidDNSConfiguration event on coredns-custom", func() (bool, string) {
		evs, err := p.Admin.CoreV1().Events("kube-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "InvalidDNSConfiguration" && e.InvolvedObject.Name == "coredns-custom" && strings.Contains(e.Message, "no-such-plugin") {
				return true, e.Message
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
	ask("after a bad fragment the stub zone still answers", []string{"dns", server, "x.corp.test.", "A"}, "A x.corp.test. 192.0.2.78")
	ask("after a bad fragment the cluster zone still answers", []string{"dns", server, svcName, "A"}, "A "+svcName+" "+web.Spec.ClusterIP)
}

// dnsLog is what the node's log says of its DNS.
func dnsLog(p *Podvisor) string {
	data, _ := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "cluster-dns") || strings.Contains(line, "DNS") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// waitUntil polls cond until it holds or timeout passes, then fails with
// cond's last word.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, timeout, last)
		}
		time.Sleep(time.Second)
	}
}
