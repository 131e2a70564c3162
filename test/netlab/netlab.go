// Package netlab is a lab of machines on one LAN, on this one machine: a
// Linux bridge in the root network namespace with the first address of a
// private /24, and one network namespace per machine, plugged into the
// bridge by a veth, with its own address and a default route through the
// bridge (podvisor takes a node's IP from the default route's interface:
// internal/agent/node/hostip.go). test/e2e's multi-node tests and the
// conformance runner's -nodes run a `podvisor server` in the root namespace,
// bound on the bridge address, and a `podvisor agent` per machine.
//
// A command runs in a machine through `nsenter --net`, which execs it: the
// pid the caller holds is the command's, so SIGTERM reaches it. Not `ip
// netns exec`: it gives the command a mount namespace with a fresh /sys,
// without the cgroup mounts runc needs ("no cgroup mount found in
// mountinfo").
//
// Network safety: the lab's addresses are a private /24 on a bridge of this
// machine; what a machine sends elsewhere goes to the root namespace, whose
// routes and rules decide (the users of the lab route their pod and service
// networks there).
package netlab

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"strings"
)

// Lab is the bridge and the machines' namespaces.
type Lab struct {
	ID      string // 4 hex digits in every name the lab makes
	Bridge  string
	Prefix  netip.Prefix
	Gateway netip.Addr // the bridge's address, in the root namespace
	Hosts   []Host
}

// Host is one machine: a network namespace with one address.
type Host struct {
	NS   string
	Veth string // the root namespace's end, a port of the bridge
	Addr netip.Addr
}

// New makes the bridge and n machines, each with IP forwarding on (pods'
// traffic to other nodes is routed through the machine) and the prefixes
// unreachable routed `unreachable` in its namespace. On an error it removes
// what it made.
func New(n int, unreachable ...netip.Prefix) (l *Lab, err error) {
	l = &Lab{ID: fmt.Sprintf("%04x", rand.IntN(1<<16))}
	l.Bridge = "pvlab" + l.ID
	prefix, err := UnusedPrefix("10.99.%d.0/24", 0, 255)
	if err != nil {
		return nil, err
	}
	l.Prefix, l.Gateway = prefix, prefix.Addr().Next()
	defer func() {
		if err != nil {
			_ = l.Remove()
		}
	}()
	if err := l.ip("link", "add", l.Bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	if err := l.setUpRoot(); err != nil {
		return nil, err
	}
	addr := l.Gateway
	for i := range n {
		addr = addr.Next()
		if err := l.addHost(i, addr, unreachable); err != nil {
			return nil, err
		}
	}
	return l, nil
}

func (l *Lab) setUpRoot() error {
	for _, args := range [][]string{
		{"addr", "add", netip.PrefixFrom(l.Gateway, 24).String(), "dev", l.Bridge},
		{"link", "set", l.Bridge, "up"},
	} {
		if err := l.ip(args...); err != nil {
			return err
		}
	}
	// Bridged frames pass through iptables' FORWARD chain when br_netfilter
	// is loaded: let the bridge's own traffic through whatever the policy.
	return run("iptables", append([]string{"-w", "-I"}, l.forwardRule()...)...)
}

func (l *Lab) addHost(i int, addr netip.Addr, unreachable []netip.Prefix) error {
	h := Host{NS: fmt.Sprintf("pvlab%s-m%d", l.ID, i+1), Veth: fmt.Sprintf("pvlab%sv%d", l.ID, i+1), Addr: addr}
	peer := fmt.Sprintf("pvlab%sp%d", l.ID, i+1)
	l.Hosts = append(l.Hosts, h)
	steps := [][]string{
		{"netns", "add", h.NS},
		{"link", "add", h.Veth, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", h.NS},
		{"link", "set", h.Veth, "master", l.Bridge, "up"},
		{"-n", h.NS, "link", "set", peer, "name", "eth0"},
		{"-n", h.NS, "addr", "add", netip.PrefixFrom(h.Addr, 24).String(), "dev", "eth0"},
		{"-n", h.NS, "link", "set", "eth0", "up"},
		{"-n", h.NS, "link", "set", "lo", "up"},
		{"-n", h.NS, "route", "add", "default", "via", l.Gateway.String()},
	}
	for _, p := range unreachable {
		steps = append(steps, []string{"-n", h.NS, "route", "add", "unreachable", p.String()})
	}
	for _, args := range steps {
		if err := l.ip(args...); err != nil {
			return err
		}
	}
	if out, err := l.Exec(i, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		return fmt.Errorf("ip_forward in %s: %v\n%s", h.NS, err, out)
	}
	return nil
}

func (l *Lab) forwardRule() []string {
	return []string{"FORWARD", "-i", l.Bridge, "-o", l.Bridge, "-m", "comment", "--comment", "podvisor lab " + l.ID, "-j", "ACCEPT"}
}

func (l *Lab) ip(args ...string) error { return run("ip", args...) }

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// Command is name ARGS in machine i's network namespace.
func (l *Lab) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + l.NetNS(i), "--", name}, args...)...)
}

// NetNS is the path of machine i's network namespace.
func (l *Lab) NetNS(i int) string { return "/run/netns/" + l.Hosts[i].NS }

// Exec runs a command in machine i's namespace to completion.
func (l *Lab) Exec(i int, name string, args ...string) (string, error) {
	out, err := l.Command(i, name, args...).CombinedOutput()
	return string(out), err
}

// Remove deletes the namespaces (their ends of the veths go with them, and
// with those the bridge's ends), the bridge and the FORWARD rule, then
// checks that nothing of the lab is left: an error names what is.
func (l *Lab) Remove() error {
	for _, h := range l.Hosts {
		_ = exec.Command("ip", "netns", "del", h.NS).Run()
		_ = exec.Command("ip", "link", "del", h.Veth).Run()
	}
	_ = exec.Command("ip", "link", "del", l.Bridge).Run()
	for exec.Command("iptables", append([]string{"-w", "-D"}, l.forwardRule()...)...).Run() == nil {
	}
	var errs []error
	name := "pvlab" + l.ID
	if out, _ := exec.Command("ip", "-o", "link").CombinedOutput(); strings.Contains(string(out), name) {
		errs = append(errs, fmt.Errorf("lab clean-up left links:\n%s", linesWith(string(out), name)))
	}
	if out, _ := exec.Command("ip", "netns", "list").CombinedOutput(); strings.Contains(string(out), name) {
		errs = append(errs, fmt.Errorf("lab clean-up left namespaces:\n%s", linesWith(string(out), name)))
	}
	if out, _ := exec.Command("iptables", "-w", "-S", "FORWARD").CombinedOutput(); strings.Contains(string(out), "podvisor lab "+l.ID) {
		errs = append(errs, fmt.Errorf("lab clean-up left a FORWARD rule:\n%s", linesWith(string(out), l.ID)))
	}
	return errors.Join(errs...)
}

// linesWith is the lines of s that contain sub.
func linesWith(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// UnusedPrefix picks a prefix of the form pattern, its %d from lo to hi,
// that no address or route of the root namespace overlaps.
func UnusedPrefix(pattern string, lo, hi int) (netip.Prefix, error) {
	var taken []netip.Prefix
	for _, args := range [][]string{{"-4", "-o", "addr"}, {"-4", "route", "show", "table", "all"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		for _, f := range strings.Fields(string(out)) {
			if p, err := netip.ParsePrefix(f); err == nil {
				taken = append(taken, p)
			} else if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
				taken = append(taken, netip.PrefixFrom(a, 32))
			}
		}
	}
	n := hi - lo + 1
	start := rand.IntN(n)
	for i := range n {
		p := netip.MustParsePrefix(fmt.Sprintf(pattern, lo+(start+i)%n))
		free := true
		for _, t := range taken {
			if t.Bits() > 0 && t.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free %s with %%d in %d-%d", pattern, lo, hi)
}
