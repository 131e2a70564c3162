// Package clusterdns is the node's cluster DNS: CoreDNS linked in as a
// library, serving the Kubernetes DNS-based service discovery zone on the
// node's address, with a Corefile podvisor writes and users extend as k3s
// users do (the kube-system/coredns-custom ConfigMap, or a fragment in the
// data dir).
package clusterdns

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Params are what the generated Corefile depends on.
type Params struct {
	Addr          netip.Addr // the node's address the DNS binds
	Port          int        // the port it listens on there
	ClusterDomain string     // cluster.local by default
	Kubeconfig    string     // credentials the kubernetes plugin watches with
	Upstream      string     // resolv.conf whose name servers get other names
	Custom        Custom     // the user's fragments
}

// Custom are the user's Corefile fragments, by source name (a ConfigMap
// key or a file name): Overrides go into the main server block, Servers
// are extra server blocks.
type Custom struct {
	Overrides map[string]string
	Servers   map[string]string
}

// Corefile is the configuration of the node's CoreDNS: one server block for
// the whole name space on Addr:Port (the cluster domain and reverse zones
// from the API, everything else to the node's own resolvers), then the
// user's server blocks, each bound to the same address.
func Corefile(p Params) string {
	var b strings.Builder
	fmt.Fprintf(&b, ".:%d {\n", p.Port)
	fmt.Fprintf(&b, "    bind %s\n", p.Addr)
	b.WriteString("    errors\n")
	// The user's overrides come before podvisor's directives so that a
	// fragment reads as in k3s; CoreDNS orders plugins by its own list anyway.
	for _, name := range sortedKeys(p.Custom.Overrides) {
		fmt.Fprintf(&b, "    # %s\n", name)
		for _, line := range strings.Split(strings.TrimRight(p.Custom.Overrides[name], "\n"), "\n") {
			fmt.Fprintf(&b, "    %s\n", line)
		}
	}
	fmt.Fprintf(&b, "    kubernetes %s in-addr.arpa ip6.arpa {\n", p.ClusterDomain)
	fmt.Fprintf(&b, "        kubeconfig %s\n", quote(p.Kubeconfig))
	// "pods insecure" answers a-b-c-d.ns.pod.<domain> as k3s and kubeadm do.
	b.WriteString("        pods insecure\n")
	b.WriteString("        fallthrough in-addr.arpa ip6.arpa\n")
	b.WriteString("        ttl 30\n")
	b.WriteString("    }\n")
	fmt.Fprintf(&b, "    forward . %s\n", quote(p.Upstream))
	b.WriteString("    cache 30\n")
	b.WriteString("    loop\n")
	b.WriteString("}\n")
	for _, name := range sortedKeys(p.Custom.Servers) {
		fmt.Fprintf(&b, "# %s\n", name)
		b.WriteString(bindServerBlocks(p.Custom.Servers[name], p.Addr))
		b.WriteString("\n")
	}
	return b.String()
}

// bindServerBlocks adds "bind ADDR" at the top of every server block of a
// fragment, so that a user's block answers on the node's address only, as
// the main block does (a block without it would listen on every address).
func bindServerBlocks(fragment string, addr netip.Addr) string {
	var b strings.Builder
	depth, comment, quoted := 0, false, false
	for _, r := range fragment {
		b.WriteRune(r)
		switch {
		case comment:
			comment = r != '\n'
		case quoted:
			quoted = r != '"'
		case r == '#':
			comment = true
		case r == '"':
			quoted = true
		case r == '{':
			depth++
			if depth == 1 {
				fmt.Fprintf(&b, "\n    bind %s", addr)
			}
		case r == '}':
			depth--
		}
	}
	return b.String()
}

func quote(s string) string {
	if strings.ContainsAny(s, " \t\"") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ServiceIP is the kube-dns Service's address: the tenth of the service
// CIDR, as k3s and kubeadm place it.
func ServiceIP(serviceCIDR string) (netip.Addr, error) {
	p, err := netip.ParsePrefix(serviceCIDR)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("service CIDR %q: %v", serviceCIDR, err)
	}
	a := p.Masked().Addr()
	for i := 0; i < 10; i++ {
		a = a.Next()
	}
	if !p.Contains(a) {
		return netip.Addr{}, fmt.Errorf("service CIDR %s has no tenth address", serviceCIDR)
	}
	return a, nil
}
