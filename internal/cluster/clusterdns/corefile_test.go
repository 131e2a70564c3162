package clusterdns

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCorefile(t *testing.T) {
	base := Params{Addr: netip.MustParseAddr("192.0.2.7"), Port: 10053, ClusterDomain: "cluster.local",
		Kubeconfig: "/data/admin.kubeconfig", Upstream: "/etc/resolv.conf"}
	withCustom := func(c Custom) Params { p := base; p.Custom = c; return p }
	tests := []struct {
		name    string
		p       Params
		want    []string // lines, in this order
		notWant []string
	}{
		{name: "the main block binds the node's address on the node's DNS port",
			p: base, want: []string{".:10053 {", "    bind 192.0.2.7", "    errors"}},
		{name: "the cluster domain and reverse zones come from the API with the node's credentials",
			p: base, want: []string{"    kubernetes cluster.local in-addr.arpa ip6.arpa {",
				"        kubeconfig /data/admin.kubeconfig", "        pods insecure", "        fallthrough in-addr.arpa ip6.arpa"}},
		{name: "other names go to the node's own resolvers, never a fixed public one",
			p: base, want: []string{"    forward . /etc/resolv.conf", "    cache 30", "    loop"},
			notWant: []string{"8.8.8.8", "1.1.1.1"}},
		{name: "another cluster domain",
			p:    func() Params { p := base; p.ClusterDomain = "corp.example"; return p }(),
			want: []string{"    kubernetes corp.example in-addr.arpa ip6.arpa {"}},
		{name: "a kubeconfig path with a space is quoted",
			p:    func() Params { p := base; p.Kubeconfig = "/data dir/k"; return p }(),
			want: []string{`        kubeconfig "/data dir/k"`}},
		{name: "overrides go into the main block, sorted by name, before its end",
			p:    withCustom(Custom{Overrides: map[string]string{"b.override": "log", "a.override": "rewrite name foo.example bar.example\n"}}),
			want: []string{"    # a.override", "    rewrite name foo.example bar.example", "    # b.override", "    log", "    kubernetes cluster.local in-addr.arpa ip6.arpa {"}},
		{name: "server blocks follow the main block, each bound to the node's address",
			p: withCustom(Custom{Servers: map[string]string{"stub.server": "example.org {\n    forward . 10.0.0.1\n}\n# a { in a comment\nexample.net:10053 { forward . 10.0.0.2 }"}}),
			want: []string{"}", "# stub.server", "example.org {", "    bind 192.0.2.7", "    forward . 10.0.0.1", "}",
				"# a { in a comment", "example.net:10053 {", "    bind 192.0.2.7 forward . 10.0.0.2 }"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Corefile(tt.p)
			lines := strings.Split(got, "\n")
			i := 0
			for _, w := range tt.want {
				for i < len(lines) && lines[i] != w {
					i++
				}
				if i == len(lines) {
					t.Fatalf("line %q missing (or out of order) in:\n%s", w, got)
				}
			}
			for _, nw := range tt.notWant {
				if strings.Contains(got, nw) {
					t.Errorf("Corefile contains %q:\n%s", nw, got)
				}
			}
		})
	}
}

func TestServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{"10.43.0.0/16": "10.43.0.10", "10.96.0.0/12": "10.96.0.10", "10.43.5.0/24": "10.43.5.10", "10.0.0.0/29": ""} {
		got, err := ServiceIP(cidr)
		if want == "" {
			if err == nil {
				t.Errorf("ServiceIP(%s) = %s, want an error", cidr, got)
			}
			continue
		}
		if err != nil || got.String() != want {
			t.Errorf("ServiceIP(%s) = %s, %v; want %s", cidr, got, err, want)
		}
	}
}
