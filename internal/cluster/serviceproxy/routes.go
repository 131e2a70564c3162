package serviceproxy

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// Routing answers whether the node's proxy still sends new connections to
// an address, from the rules it programmed in the kernel: what the agent
// waits on before it stops a pod that asked to be taken out of its
// Services first. The zero value knows of no proxy (disabled, or not
// started yet) and answers at once.
type Routing struct {
	mode atomic.Value // Mode, once Run chose it
}

func (r *Routing) setMode(m Mode) {
	if r != nil {
		r.mode.Store(m)
	}
}

// Mode is the backend the proxy programs; "" when none runs.
func (r *Routing) Mode() Mode {
	if r == nil {
		return ""
	}
	m, _ := r.mode.Load().(Mode)
	return m
}

// pollEvery is how often WaitUnrouted reads the rules: kube-proxy applies a
// change at most once a second (its minimum sync period).
const pollEvery = 200 * time.Millisecond

// WaitUnrouted waits until no rule of the node's proxy sends a new
// connection to any of ips, for at most max; it reports whether one still
// did when it gave up (or when the rules could not be read, with why).
// Connections already made are not the proxy's to end: conntrack keeps them.
func (r *Routing) WaitUnrouted(ctx context.Context, ips []netip.Addr, max time.Duration) (still bool, err error) {
	mode := r.Mode()
	if mode == "" || len(ips) == 0 {
		return false, nil
	}
	deadline := time.Now().Add(max)
	for {
		still, err = RoutesTo(ctx, mode, ips...)
		if err != nil || !still || !time.Now().Add(pollEvery).Before(deadline) {
			return still, err
		}
		select {
		case <-ctx.Done():
			return still, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// RoutesTo reads the rules of mode's backend and reports whether one sends
// new connections to any of ips.
func RoutesTo(ctx context.Context, mode Mode, ips ...netip.Addr) (bool, error) {
	for _, family := range []struct {
		v6        bool
		nft, save []string
	}{
		{false, []string{"nft", "list", "table", "ip", "kube-proxy"}, []string{"iptables-save", "-t", "nat"}},
		{true, []string{"nft", "list", "table", "ip6", "kube-proxy"}, []string{"ip6tables-save", "-t", "nat"}},
	} {
		var want []netip.Addr
		for _, ip := range ips {
			if v6 := ip.Is6() && !ip.Is4In6(); v6 == family.v6 {
				want = append(want, ip.Unmap())
			}
		}
		if len(want) == 0 {
			continue
		}
		cmd, parse := family.save, routesToIPTables
		if mode == NFTables {
			cmd, parse = family.nft, routesToNFT
		}
		out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).Output()
		if err != nil {
			if family.v6 {
				continue // no IPv6 rules (table or tool): nothing routes there
			}
			return false, fmt.Errorf("%s: %w", strings.Join(cmd, " "), err)
		}
		for _, ip := range want {
			if parse(string(out), ip) {
				return true, nil
			}
		}
	}
	return false, nil
}

// The two ways kube-proxy's nftables rules send a Service's new connections
// to an endpoint. Most service chains DNAT at once through a random map
// ("dnat ip to numgen random mod 3 map { 0 : 10.42.0.5 . 8080, … }");
// where an endpoint needs a chain of its own (session affinity, hairpin
// masquerade) the service chain jumps to it ("goto
// endpoint-HASH-ns/svc/tcp/p80__10.42.0.5/8080", from a random vmap or an
// affinity rule), and an endpoint chain is reached only through such a goto.
var (
	dnatMap     = regexp.MustCompile(`(?s)numgen random mod \d+ map \{([^}]*)\}`)
	dnatElement = regexp.MustCompile(`\d+\s*:\s*([0-9a-fA-F:.]+)\s+\.\s+\d+`)
	endpointRef = regexp.MustCompile(`goto "?endpoint-[A-Z0-9]+-[^ ,}"]*__([^ ,}"]+)/[0-9]+`)
)

// routesToNFT reports whether a listing of kube-proxy's nftables table
// sends new connections to ip.
func routesToNFT(listing string, ip netip.Addr) bool {
	is := func(s string) bool {
		a, err := netip.ParseAddr(strings.Trim(s, "[]"))
		return err == nil && a == ip
	}
	for _, m := range endpointRef.FindAllStringSubmatch(listing, -1) {
		if is(m[1]) {
			return true
		}
	}
	for _, m := range dnatMap.FindAllStringSubmatch(listing, -1) {
		for _, e := range dnatElement.FindAllStringSubmatch(m[1], -1) {
			if is(e[1]) {
				return true
			}
		}
	}
	return false
}

// routesToIPTables reports whether iptables-save's nat table sends new
// connections to ip: a KUBE-SEP chain that DNATs to it and that some
// other chain (a Service's, its affinity check) jumps to.
func routesToIPTables(save string, ip netip.Addr) bool {
	dnatTo := map[string]bool{} // KUBE-SEP chains that DNAT to ip
	var jumps []string          // KUBE-SEP chains jumped to from other chains
	for _, line := range strings.Split(save, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		chain := f[1]
		for i := 2; i+1 < len(f); i++ {
			switch {
			case f[i] == "--to-destination" && strings.HasPrefix(chain, "KUBE-SEP-"):
				if ap, err := netip.ParseAddrPort(f[i+1]); err == nil && ap.Addr() == ip {
					dnatTo[chain] = true
				}
			case f[i] == "-j" && strings.HasPrefix(f[i+1], "KUBE-SEP-") && chain != f[i+1]:
				jumps = append(jumps, f[i+1])
			}
		}
	}
	for _, j := range jumps {
		if dnatTo[j] {
			return true
		}
	}
	return false
}
