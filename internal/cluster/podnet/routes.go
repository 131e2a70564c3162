package podnet

import (
	"os/exec"
	"strconv"

	"github.com/flannel-io/flannel/pkg/backend"
	"github.com/flannel-io/flannel/pkg/lease"
	"github.com/vishvananda/netlink"
)

// RouteProtocol marks the routes podnet makes (the protocol field of a
// route, as routing daemons mark theirs; unused by iproute2's table), so
// that RemoveRoutes finds them: flannel leaves its routes when it stops, to
// keep traffic flowing across a restart.
const RouteProtocol = 86

// markRoutes gives the backend's routes RouteProtocol. (flannel compares
// routes by destination, gateway and link only, so routes of an earlier
// run, unmarked, are kept as they are.)
func markRoutes(n backend.Network) {
	rn, ok := n.(*backend.RouteNetwork)
	if !ok || rn.GetRoute == nil {
		return
	}
	get := rn.GetRoute
	rn.GetRoute = func(l *lease.Lease) *netlink.Route {
		r := get(l)
		r.Protocol = RouteProtocol
		return r
	}
}

// RemoveRoutes removes the routes to other nodes' pods that podnet left on
// this host (`podvisor reset`: a node gone for good).
func RemoveRoutes() {
	_ = exec.Command("ip", "-4", "route", "flush", "proto", strconv.Itoa(RouteProtocol)).Run()
}
