package main

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// defaultServiceCIDR is podvisor's service network
// (internal/ranges.ServiceCIDR); the runner checks it against the
// cluster's ServiceCIDR objects once podvisor is up.
var defaultServiceCIDR = netip.MustParsePrefix("10.43.0.0/16")

// serviceProxyLock is test/e2e's lock (services_test.go): held by whoever
// runs a podvisor with its service proxy on this machine, since two proxies
// share the host's kube-proxy nftables table and the guard below.
const serviceProxyLock = "/tmp/podvisor-e2e-service-proxy.lock"

// netGuard keeps the run's traffic on this machine: the specs reach pods
// and Service IPs, and this machine has a default route to elsewhere.
//
//   - The pod network (the runner's /16, of which podvisor's node has a /24
//     on its bridge) is routed `unreachable`, as test/e2e's harness routes
//     its service CIDR: the node's /24 is more specific and stays local;
//     any other address of the /16 fails at once instead of leaving.
//   - The service network is not routed away: kube-apiserver (webhooks,
//     aggregated APIs) and the e2e binary reach ClusterIPs from the host,
//     whose route is looked up before the proxy's DNAT in nat OUTPUT, so an
//     unreachable route would fail them all. Instead a filter chain in
//     OUTPUT and FORWARD, after the proxy's DNAT, rejects what is still
//     addressed to the service network: a ClusterIP the proxy has no rule
//     for fails at once, from the host and from pods.
//
// With -nodes, the nodes are machines of a lab (test/netlab) whose bridge
// is in this namespace, and each machine's default route leads here:
//
//   - what a machine sends to this namespace to be routed elsewhere (its
//     DNS forwarder's upstream, an address no rule knows) is rejected in
//     FORWARD unless it goes back out on the bridge (machine to machine);
//   - each machine gets the service network's filter chains too (its own
//     service proxy translates there), through machineRules.
type netGuard struct {
	serviceCIDR, clusterCIDR netip.Prefix
	labBridge                string // -nodes: the lab's bridge, else ""
}

const guardTable = "podvisor-conformance"

func (g netGuard) String() string {
	s := fmt.Sprintf("%s unreachable except the nodes' pods; %s rejected unless a service proxy translated it (nft table ip %s)",
		g.clusterCIDR, g.serviceCIDR, guardTable)
	if g.labBridge != "" {
		s += fmt.Sprintf("; nothing from the lab's bridge %s forwarded anywhere but back to it; the same table in every machine", g.labBridge)
	}
	return s
}

// nftRules is the nftables script of the service network's guard: filter
// chains at the filter priority (0), after the nat hooks (-100) where the
// proxy translates Service addresses.
func (g netGuard) nftRules() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s {\n", guardTable)
	for _, hook := range []string{"output", "forward"} {
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority filter; policy accept;\n", hook, hook)
		if hook == "forward" && g.labBridge != "" {
			fmt.Fprintf(&b, "\t\tiifname %q oifname != %q reject with icmp type admin-prohibited\n", g.labBridge, g.labBridge)
		}
		fmt.Fprintf(&b, "\t\tip daddr %s reject with icmp type host-unreachable\n\t}\n", g.serviceCIDR)
	}
	b.WriteString("}\n")
	return b.String()
}

// machineRules is the nftables script for a lab machine's namespace: the
// service network's chains alone (its default route leads to this
// namespace, where the rest is guarded).
func (g netGuard) machineRules() string {
	return netGuard{serviceCIDR: g.serviceCIDR}.nftRules()
}

// loadNFT loads an nftables script with cmd, an `nft -f -` (in this
// namespace or a machine's).
func loadNFT(script string, cmd *exec.Cmd) error {
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f: %v: %s", err, out)
	}
	return nil
}

// install puts the route and the rules in place; a guard left by an
// interrupted run is replaced.
func (g netGuard) install() error {
	if out, err := exec.Command("ip", "route", "replace", "unreachable", g.clusterCIDR.String()).CombinedOutput(); err != nil {
		return fmt.Errorf("ip route replace unreachable %s: %v: %s", g.clusterCIDR, err, out)
	}
	_ = exec.Command("nft", "delete", "table", "ip", guardTable).Run()
	if err := loadNFT(g.nftRules(), exec.Command("nft", "-f", "-")); err != nil {
		_ = g.remove()
		return err
	}
	return nil
}

// remove takes the route and the rules away again.
func (g netGuard) remove() error {
	var errs []string
	if out, err := exec.Command("ip", "route", "del", "unreachable", g.clusterCIDR.String()).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Sprintf("ip route del: %v: %s", err, strings.TrimSpace(string(out))))
	}
	if out, err := exec.Command("nft", "delete", "table", "ip", guardTable).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Sprintf("nft delete table: %v: %s", err, strings.TrimSpace(string(out))))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// lockServiceProxy waits up to limit for test/e2e's service proxy lock and
// returns its release.
func lockServiceProxy(limit time.Duration, logf func(string, ...any)) (func(), error) {
	f, err := os.OpenFile(serviceProxyLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(limit)
	for said := false; ; said = true {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%s still held after %v (a test/e2e service test runs a proxy): %w", serviceProxyLock, limit, err)
		}
		if !said {
			logf("waiting for %s: another podvisor on this machine runs its service proxy", serviceProxyLock)
		}
		time.Sleep(5 * time.Second)
	}
}
