package podnames

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func pod(mod func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u1"}}
	if mod != nil {
		mod(p)
	}
	return p
}

func TestHostnameAndDomain(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b"
	for _, tc := range []struct {
		name             string
		pod              *v1.Pod
		hostname, domain string
		fqdn             *bool
		kernel, err      string
	}{
		{name: "the pod's name", pod: pod(nil), hostname: "web", kernel: "web"},
		{name: "spec.hostname and subdomain", pod: pod(func(p *v1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db-0", "db" }),
			hostname: "db-0", domain: "db.shop.svc.cluster.local", kernel: "db-0"},
		{name: "as FQDN", pod: pod(func(p *v1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "db-0", "db" }), fqdn: ptr.To(true),
			hostname: "db-0", domain: "db.shop.svc.cluster.local", kernel: "db-0.db.shop.svc.cluster.local"},
		{name: "as FQDN without subdomain: the short name", pod: pod(nil), fqdn: ptr.To(true), hostname: "web", kernel: "web"},
		{name: "cut to 63 without a trailing dash", pod: pod(func(p *v1.Pod) { p.Name = long + "c" }),
			hostname: strings.Repeat("a", 62), kernel: strings.Repeat("a", 62)},
		{name: "FQDN over 64", pod: pod(func(p *v1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = strings.Repeat("h", 40), "sub" }), fqdn: ptr.To(true),
			hostname: strings.Repeat("h", 40), domain: "sub.shop.svc.cluster.local",
			err: "failed to construct FQDN from pod hostname and cluster domain, FQDN " + strings.Repeat("h", 40) + ".sub.shop.svc.cluster.local is too long (64 characters is the max, 67 characters requested)"},
		{name: "hostnameOverride names the pod whole: no subdomain", pod: pod(func(p *v1.Pod) {
			p.Spec.Hostname, p.Spec.Subdomain, p.Spec.HostnameOverride = "db-0", "db", ptr.To("my.host-name")
		}), hostname: "my.host-name", kernel: "my.host-name"},
		{name: "hostnameOverride cut to 63", pod: pod(func(p *v1.Pod) { p.Spec.HostnameOverride = ptr.To(strings.Repeat("a", 62) + ".bbb") }),
			hostname: strings.Repeat("a", 62), kernel: strings.Repeat("a", 62)},
		{name: "bad hostnameOverride", pod: pod(func(p *v1.Pod) { p.Spec.HostnameOverride = ptr.To("Not_A_Subdomain") }),
			err: `pod HostnameOverride "Not_A_Subdomain" is not a valid DNS subdomain`},
		{name: "bad hostname", pod: pod(func(p *v1.Pod) { p.Spec.Hostname = "Not_A_Label" }),
			err: `pod Hostname "Not_A_Label" is not a valid DNS label`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, d, err := HostnameAndDomain(tc.pod, "cluster.local")
			var k string
			if err == nil {
				h2, d2 := h, d
				k, err = KernelHostname(h2, d2, tc.fqdn)
			}
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || h != tc.hostname || d != tc.domain || k != tc.kernel {
				t.Fatalf("got %q %q %q %v, want %q %q %q", h, d, k, err, tc.hostname, tc.domain, tc.kernel)
			}
		})
	}
}

func TestParseResolvConf(t *testing.T) {
	r, err := ParseResolvConf("# comment\nnameserver 10.0.0.2\nsearch a.example. old\nsearch b.example . c.example\noptions ndots:2 edns0\nnameserver 10.0.0.3\noptions ndots:3 timeout:1\n")
	if err != nil {
		t.Fatal(err)
	}
	want := Resolver{Servers: []string{"10.0.0.2", "10.0.0.3"}, Searches: []string{"b.example", "c.example"}, Options: []string{"ndots:3", "edns0", "timeout:1"}}
	if fmt.Sprint(r) != fmt.Sprint(want) {
		t.Fatalf("got %+v, want %+v", r, want)
	}
	if _, err := ParseResolvConf("nameserver\n"); err == nil {
		t.Fatal("an empty nameserver line is not an error")
	}
}

func TestPodDNS(t *testing.T) {
	host := Resolver{Servers: []string{"192.0.2.53"}, Searches: []string{"corp.example"}, Options: []string{"edns0"}}
	cluster := DNSConfig{ClusterDNS: []string{"10.43.0.10"}, ClusterDomain: "cluster.local", Host: host}
	noCluster := DNSConfig{ClusterDomain: "cluster.local", Host: host}
	hostNet := func(p *v1.Pod) { p.Spec.HostNetwork = true }
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		cfg    DNSConfig
		want   string
		events []string
	}{
		{name: "ClusterFirst", pod: pod(nil), cfg: cluster,
			want: "[10.43.0.10] [shop.svc.cluster.local svc.cluster.local cluster.local corp.example] [ndots:5]"},
		{name: "ClusterFirst on the host network is Default", pod: pod(hostNet), cfg: cluster,
			want: "[192.0.2.53] [corp.example] [edns0]"},
		{name: "ClusterFirstWithHostNet", pod: pod(func(p *v1.Pod) { hostNet(p); p.Spec.DNSPolicy = v1.DNSClusterFirstWithHostNet }), cfg: cluster,
			want: "[10.43.0.10] [shop.svc.cluster.local svc.cluster.local cluster.local corp.example] [ndots:5]"},
		{name: "ClusterFirst without clusterDNS falls back to Default", pod: pod(nil), cfg: noCluster,
			want:   "[192.0.2.53] [corp.example] [edns0]",
			events: []string{`MissingClusterDNS pod: "web_shop(u1)". kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`, "MissingClusterDNS(node)"}},
		{name: "Default", pod: pod(func(p *v1.Pod) { p.Spec.DNSPolicy = v1.DNSDefault }), cfg: cluster,
			want: "[192.0.2.53] [corp.example] [edns0]"},
		{name: "Default with resolvConf \"\"", pod: pod(func(p *v1.Pod) { p.Spec.DNSPolicy = v1.DNSDefault }),
			cfg: DNSConfig{HostUnset: true, NodeIPs: []string{"10.0.0.5", "fd00::5"}}, want: "[127.0.0.1 ::1] [.] []"},
		{name: "None with dnsConfig", pod: pod(func(p *v1.Pod) {
			p.Spec.DNSPolicy = v1.DNSNone
			p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"x.example"},
				Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "rotate"}}}
		}), cfg: cluster, want: "[1.1.1.1] [x.example] [ndots:2 rotate]"},
		{name: "dnsConfig merges", pod: pod(func(p *v1.Pod) {
			p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"10.43.0.10", "1.1.1.1"}, Searches: []string{"cluster.local", "y.example"},
				Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("1")}}}
		}), cfg: cluster,
			want: "[10.43.0.10 1.1.1.1] [shop.svc.cluster.local svc.cluster.local cluster.local corp.example y.example] [ndots:1]"},
		{name: "more than 3 name servers", pod: pod(func(p *v1.Pod) {
			p.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "8.8.8.8", "9.9.9.9"}}
		}), cfg: cluster, want: "[10.43.0.10 1.1.1.1 8.8.8.8] [shop.svc.cluster.local svc.cluster.local cluster.local corp.example] [ndots:5]",
			events: []string{"DNSConfigForming Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 10.43.0.10 1.1.1.1 8.8.8.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, evs := PodDNS(tc.pod, tc.cfg)
			if got := fmt.Sprint(r.Servers, r.Searches, r.Options); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
			var got []string
			for _, e := range evs {
				if e.OnNode {
					got = append(got, e.Reason+"(node)")
				} else {
					got = append(got, e.Reason+" "+e.Message)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.events) {
				t.Errorf("events %q, want %q", got, tc.events)
			}
		})
	}
}

func TestSearchLimits(t *testing.T) {
	var many []string
	for i := 0; i < 40; i++ {
		many = append(many, fmt.Sprintf("d%02d.%s", i, strings.Repeat("x", 60)))
	}
	p := pod(func(p *v1.Pod) {
		p.Spec.DNSPolicy = v1.DNSNone
		p.Spec.DNSConfig = &v1.PodDNSConfig{Searches: append([]string{strings.Repeat("y", 254)}, many...)}
	})
	r, evs := PodDNS(p, DNSConfig{})
	if n := len(strings.Join(r.Searches, " ")); n > 2048 || len(r.Searches) > 32 {
		t.Fatalf("%d search domains, %d characters: over the limits", len(r.Searches), n)
	}
	if r.Searches[0] != many[0] {
		t.Fatalf("first search %q: the over-long domain should be dropped, the order kept", r.Searches[0])
	}
	if len(evs) != 1 || !strings.HasPrefix(evs[0].Message, "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: d00.") {
		t.Fatalf("events %+v", evs)
	}
}

func TestHostsFile(t *testing.T) {
	got := string(HostsFile([]string{"10.42.0.7"}, "db-0", "db.shop.svc.cluster.local",
		[]v1.HostAlias{{IP: "192.0.2.1", Hostnames: []string{"foo.local", "bar.local"}}}))
	want := "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n" +
		"10.42.0.7\tdb-0.db.shop.svc.cluster.local\tdb-0\n\n# Entries added by HostAliases.\n192.0.2.1\tfoo.local\tbar.local\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := string(HostsFile([]string{"10.42.0.7"}, "web", "", nil)); !strings.HasSuffix(got, "fe00::2\tip6-allrouters\n10.42.0.7\tweb\n") {
		t.Errorf("without domain or aliases:\n%s", got)
	}
	if got := string(HostNetworkHostsFile([]byte("127.0.0.1 localhost\n"), nil)); got != "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n" {
		t.Errorf("host network: %q", got)
	}
}
