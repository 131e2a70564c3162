// Package registration is the node side of kubelet plugin registration
// (pluginregistration.k8s.io/v1) for CSI drivers, as the kubelet's plugin
// watcher does it: a driver's registrar (node-driver-registrar) puts a
// socket into <agent dir>/plugins_registry/; the agent calls GetInfo on it,
// validates the answer, hands the driver to a Handler and tells the
// registrar the outcome with NotifyRegistrationStatus. A socket that goes
// away deregisters its driver.
//
// The decisions (which sockets to register or deregister, whether an
// answer is acceptable) are pure functions in this file; watcher.go is the
// shell that scans the directory and makes the calls.
package registration

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Socket is a registration socket found in the directory. ID changes when
// the socket is re-created (a restarted registrar), which re-registers it.
type Socket struct {
	Path string
	ID   string
}

// Registered is a socket whose driver is registered.
type Registered struct {
	ID   string
	Name string // the driver's name, for deregistering
}

// Plan compares the sockets in the directory with those registered:
// sockets that are new or were re-created are to be registered; drivers
// whose socket is gone or was re-created are to be deregistered first.
// Both lists are sorted by path so the work is done in a stable order.
func Plan(found []Socket, registered map[string]Registered) (register []Socket, deregister []string) {
	seen := make(map[string]string, len(found))
	for _, s := range found {
		seen[s.Path] = s.ID
		if r, ok := registered[s.Path]; !ok || r.ID != s.ID {
			register = append(register, s)
		}
	}
	for path, r := range registered {
		if id, ok := seen[path]; !ok || id != r.ID {
			deregister = append(deregister, path)
		}
	}
	slices.SortFunc(register, func(a, b Socket) int { return strings.Compare(a.Path, b.Path) })
	slices.Sort(deregister)
	return register, deregister
}

// Plugin is a validated CSI driver registration.
type Plugin struct {
	Name     string
	Endpoint string   // the driver's CSI socket
	Versions []string // the CSI versions the driver supports
}

// Validate checks a registrar's GetInfo answer as the kubelet's CSI plugin
// does: a CSIPlugin with a name and at least one CSI 1.x version (0.x is
// no longer served upstream either). An empty endpoint means the driver
// serves CSI on the registration socket itself.
func Validate(info *regapi.PluginInfo, socket string) (Plugin, error) {
	if info == nil {
		return Plugin{}, errors.New("registrar returned no plugin info")
	}
	if info.Type != regapi.CSIPlugin {
		return Plugin{}, fmt.Errorf("plugin type %q is not supported; this node registers %q plugins", info.Type, regapi.CSIPlugin)
	}
	if info.Name == "" {
		return Plugin{}, errors.New("registrar returned an empty driver name")
	}
	var versions []string
	for _, v := range info.SupportedVersions {
		if major(v) == 1 {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		return Plugin{}, fmt.Errorf("driver %s supports CSI versions %v; this node needs 1.x", info.Name, info.SupportedVersions)
	}
	endpoint := info.Endpoint
	if endpoint == "" {
		endpoint = socket
	}
	return Plugin{Name: info.Name, Endpoint: endpoint, Versions: versions}, nil
}

// major is the major version of "1", "1.2.0" or "v1.2.0", or -1.
func major(v string) int {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	head, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(head)
	if err != nil {
		return -1
	}
	return n
}
