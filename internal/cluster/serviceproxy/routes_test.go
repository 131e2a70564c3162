package serviceproxy

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// nftListing has the shapes of `nft list table ip kube-proxy` (kube-proxy
// v1.36): a service that DNATs through a random map (the common case, as
// listed on this machine), one with two endpoint chains in its random vmap,
// one with session affinity, and an endpoint chain left over from an
// endpoint no service chain reaches.
const nftListing = `table ip kube-proxy {
	map no-endpoint-services {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.43.9.9 . tcp . 80 comment "ns9/empty" : goto reject-chain }
	}
	chain service-XMUS4HOO-rollout/web/tcp/ {
		meta l4proto tcp dnat ip to numgen random mod 3 map { 0 : 10.102.0.11 . 8080, 1 : 10.102.0.12 . 8080,
			     2 : 10.102.0.13 . 8080 }
	}
	chain service-ULMVA6XW-ns1/svc1/tcp/p80 {
		ip daddr 172.30.0.41 tcp dport 80 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
		numgen random mod 2 vmap { 0 : goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80, 1 : goto endpoint-6KQWRTYH-ns1/svc1/tcp/p80__10.180.0.2/80 }
	}
	chain service-HVFWP5L3-ns5/svc5/tcp/p80 {
		ip saddr @affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 goto endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80
	}
	chain endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 {
		ip saddr 10.180.0.1 jump mark-for-masquerade
		meta l4proto tcp dnat to 10.180.0.1:80
	}
	chain endpoint-ZZZZZZZZ-ns1/svc1/tcp/p80__10.180.0.9/80 {
		meta l4proto tcp dnat to 10.180.0.9:80
	}
}
`

const iptablesSave = `*nat
:KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
:KUBE-SEP-OLD0000000000000 - [0:0]
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
-A KUBE-SEP-OLD0000000000000 -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.9:80
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment ns1/svc1:p80 -j KUBE-SEP-SXIVWICOYRO3J4NJ
COMMIT
`

func TestRoutesTo(t *testing.T) {
	for _, tc := range []struct {
		ip       string
		nft, ipt bool
	}{
		{"10.102.0.11", true, false}, // first element of a DNAT map
		{"10.102.0.13", true, false}, // an element on the map's next line
		{"10.43.9.9", false, false},  // a key of another map, not a DNAT target
		{"10.180.0.1", true, true},   // in a service's vmap / jumped to
		{"10.180.0.2", true, false},  // second vmap element
		{"10.180.0.3", true, false},  // affinity goto
		{"10.180.0.9", false, false}, // chain left over, nothing reaches it
		{"10.180.0.10", false, false},
		{"172.30.0.41", false, false}, // the Service's own address
	} {
		ip := netip.MustParseAddr(tc.ip)
		if got := routesToNFT(nftListing, ip); got != tc.nft {
			t.Errorf("nftables: routes to %s = %v, want %v", tc.ip, got, tc.nft)
		}
		if got := routesToIPTables(iptablesSave, ip); got != tc.ipt {
			t.Errorf("iptables: routes to %s = %v, want %v", tc.ip, got, tc.ipt)
		}
	}
}

func TestWaitUnroutedWithoutProxy(t *testing.T) {
	var r Routing // no proxy chose a mode: nothing to wait for
	still, err := r.WaitUnrouted(context.Background(), []netip.Addr{netip.MustParseAddr("10.0.0.1")}, time.Minute)
	if still || err != nil {
		t.Fatalf("WaitUnrouted without a proxy = %v, %v; want false, nil", still, err)
	}
	var nilRouting *Routing
	if still, err := nilRouting.WaitUnrouted(context.Background(), nil, time.Minute); still || err != nil {
		t.Fatalf("nil Routing: %v, %v", still, err)
	}
}
