package podnet

import (
	"context"
	"log/slog"
	"net"

	"github.com/flannel-io/flannel/pkg/lease"
	"github.com/flannel-io/flannel/pkg/subnet"
)

// remoteLeases hides from the backend the leases of nodes whose address is
// one of this host's. Several podvisor agents may share one host and its
// network namespace (`podvisor agent --server-data-dir`, the e2e tests):
// each reaches the others' pods through their bridges' directly connected
// routes, which host-gw would otherwise replace with routes via this very
// host.
type remoteLeases struct {
	subnet.Manager
	log        *slog.Logger
	localAddrs func() ([]net.Addr, error) // net.InterfaceAddrs
}

// WatchLeases passes on the lease events of nodes on other hosts. Like
// flannel's, it closes receiver when the watch ends.
func (m remoteLeases) WatchLeases(ctx context.Context, receiver chan []lease.LeaseWatchResult) error {
	in := make(chan []lease.LeaseWatchResult)
	errc := make(chan error, 1)
	go func() { errc <- m.Manager.WatchLeases(ctx, in) }()
	for results := range in {
		if out := m.filter(results); len(out) > 0 {
			receiver <- out
		}
	}
	close(receiver)
	return <-errc
}

// filter drops the events about local nodes' leases. A result left with
// no events is dropped whole: passed on empty it would read as an empty
// snapshot, which removes every route. A snapshot keeps its meaning (the
// whole set of leases) with the local ones taken out.
func (m remoteLeases) filter(results []lease.LeaseWatchResult) []lease.LeaseWatchResult {
	local := m.isLocal()
	var out []lease.LeaseWatchResult
	for _, r := range results {
		if len(r.Events) == 0 {
			r.Snapshot = keep(r.Snapshot, func(l lease.Lease) bool { return !m.skip(local, l) })
			out = append(out, r)
			continue
		}
		r.Events = keep(r.Events, func(e lease.Event) bool { return !m.skip(local, e.Lease) })
		if len(r.Events) > 0 {
			out = append(out, r)
		}
	}
	return out
}

func (m remoteLeases) skip(local func(net.IP) bool, l lease.Lease) bool {
	if !l.EnableIPv4 || !local(l.Attrs.PublicIP.ToIP()) {
		return false
	}
	m.log.Debug("pod network: no route to a node on this host: its bridge routes its pods", "podCIDR", l.Subnet.String(), "nodeIP", l.Attrs.PublicIP.String())
	return true
}

// isLocal reads this host's addresses once per batch of events: they may
// change while the agent runs.
func (m remoteLeases) isLocal() func(net.IP) bool {
	addrs, err := m.localAddrs()
	if err != nil {
		m.log.Warn("pod network: listing this host's addresses", "err", err)
	}
	return func(ip net.IP) bool {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(ip) {
				return true
			}
		}
		return false
	}
}

func keep[T any](s []T, ok func(T) bool) []T {
	var out []T
	for _, v := range s {
		if ok(v) {
			out = append(out, v)
		}
	}
	return out
}
