package podnet

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/flannel-io/flannel/pkg/ip"
	"github.com/flannel-io/flannel/pkg/lease"
	"github.com/flannel-io/flannel/pkg/subnet"
)

// feed is a subnet manager whose lease watch sends the given results.
type feed struct {
	subnet.Manager
	results [][]lease.LeaseWatchResult
}

func (f feed) WatchLeases(ctx context.Context, receiver chan []lease.LeaseWatchResult) error {
	for _, r := range f.results {
		receiver <- r
	}
	close(receiver)
	return nil
}

func testLease(t *testing.T, podCIDR, nodeIP string) lease.Lease {
	t.Helper()
	_, n, err := net.ParseCIDR(podCIDR)
	if err != nil {
		t.Fatal(err)
	}
	return lease.Lease{EnableIPv4: true, Subnet: ip.FromIPNet(n),
		Attrs: lease.LeaseAttrs{PublicIP: ip.FromIP(net.ParseIP(nodeIP)), BackendType: "host-gw"}}
}

// watch runs the flannel watch the host-gw backend runs (own lease first)
// over m and returns the events it would act on.
func watch(t *testing.T, m subnet.Manager, own lease.Lease) []lease.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evts := make(chan []lease.Event)
	go subnet.WatchLeases(ctx, m, &own, evts)
	var got []lease.Event
	for b := range evts {
		got = append(got, b...)
	}
	return got
}

func routedSubnets(evts []lease.Event) []string {
	var s []string
	for _, e := range evts {
		verb := "added "
		if e.Type == lease.EventRemoved {
			verb = "removed "
		}
		s = append(s, verb+e.Lease.Subnet.String())
	}
	return s
}

// Agents sharing this host's network namespace publish the same address;
// the routes to their pod CIDRs are their bridges', not via this host.
func TestNodesOnThisHostGetNoRoute(t *testing.T) {
	hostAddrs := func() ([]net.Addr, error) {
		return []net.Addr{&net.IPNet{IP: net.ParseIP("192.0.2.1").To4(), Mask: net.CIDRMask(24, 32)}}, nil
	}
	own := testLease(t, "10.42.0.0/24", "192.0.2.1")
	local := testLease(t, "10.42.1.0/24", "192.0.2.1")
	remote := testLease(t, "10.42.2.0/24", "192.0.2.2")
	sm := feed{results: [][]lease.LeaseWatchResult{
		{{Events: []lease.Event{{Type: lease.EventAdded, Lease: own}}}},
		{{Events: []lease.Event{{Type: lease.EventAdded, Lease: local}}}},
		{{Events: []lease.Event{{Type: lease.EventAdded, Lease: remote}}}},
		{{Events: []lease.Event{{Type: lease.EventRemoved, Lease: local}}}},
		// An empty snapshot would mean: no other nodes at all.
		{{Snapshot: []lease.Lease{local, remote}}},
		{{Events: []lease.Event{{Type: lease.EventRemoved, Lease: remote}}}},
	}}

	unfiltered := routedSubnets(watch(t, sm, own))
	if !slices.Contains(unfiltered, "added 10.42.1.0/24") {
		t.Fatalf("flannel itself passes on the local node's lease, the test's premise: got %v", unfiltered)
	}

	got := routedSubnets(watch(t, remoteLeases{Manager: sm, log: slog.Default(), localAddrs: hostAddrs}, own))
	want := []string{"added 10.42.2.0/24", "removed 10.42.2.0/24"}
	if !slices.Equal(got, want) {
		t.Errorf("route events = %v, want %v", got, want)
	}
}
