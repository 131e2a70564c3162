// Package drivers is this node's registry of CSI drivers: the
// registration.Handler that, for each driver a registrar announces, asks
// the driver for its node info (NodeGetInfo), writes the driver into the
// node's CSINode and keeps a client to it for the volume manager; and that
// undoes both when the driver goes away.
package drivers

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/podvisor/podvisor/internal/agent/csi/csinode"
	"github.com/podvisor/podvisor/internal/agent/csi/nodeclient"
	"github.com/podvisor/podvisor/internal/agent/csi/registration"
)

// CSINode is the part of csinode.Writer the registry uses.
type CSINode interface {
	Install(ctx context.Context, d storagev1.CSINodeDriver) error
	Uninstall(ctx context.Context, name string) error
}

var _ CSINode = csinode.Writer{}
var _ registration.Handler = (*Registry)(nil)

// Driver is a registered driver.
type Driver struct {
	Name     string
	Endpoint string
	Versions []string
	Node     nodeclient.NodeInfo
}

// Registry holds the registered drivers. It is safe for concurrent use:
// the registration watcher writes it, volume operations read it.
type Registry struct {
	CSINode CSINode
	// CallTimeout bounds NodeGetInfo during registration.
	CallTimeout time.Duration
	Log         *slog.Logger

	mu      sync.Mutex
	drivers map[string]entry
}

type entry struct {
	Driver
	client *nodeclient.Client
}

// Register connects to the driver, asks for its node info and writes it
// into the CSINode. A driver registered again (its registrar restarted)
// replaces the old entry and connection.
func (r *Registry) Register(ctx context.Context, p registration.Plugin) error {
	client, err := nodeclient.Dial(p.Endpoint)
	if err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, r.CallTimeout)
	info, err := client.NodeGetInfo(callCtx)
	cancel()
	if err != nil {
		client.Close()
		return fmt.Errorf("driver %s at %s: %w", p.Name, p.Endpoint, err)
	}
	if err := r.CSINode.Install(ctx, csinode.Driver(p.Name, info.NodeID, info.MaxVolumes, info.Topology)); err != nil {
		client.Close()
		return fmt.Errorf("driver %s: %w", p.Name, err)
	}
	r.mu.Lock()
	if r.drivers == nil {
		r.drivers = map[string]entry{}
	}
	old, had := r.drivers[p.Name]
	r.drivers[p.Name] = entry{Driver: Driver{Name: p.Name, Endpoint: p.Endpoint, Versions: slices.Clone(p.Versions), Node: info}, client: client}
	r.mu.Unlock()
	if had {
		old.client.Close()
	}
	return nil
}

// Deregister forgets the driver and removes it from the CSINode. A failed
// API write is logged: the next registration of the driver rewrites its
// entry, and nothing on the node depends on the stale one.
func (r *Registry) Deregister(ctx context.Context, name string) {
	r.mu.Lock()
	e, ok := r.drivers[name]
	delete(r.drivers, name)
	r.mu.Unlock()
	if !ok {
		return
	}
	e.client.Close()
	if err := r.CSINode.Uninstall(ctx, name); err != nil {
		r.Log.Warn("removing CSI driver from CSINode", "driver", name, "err", err)
	}
}

// Get returns a registered driver and the client to its node service; the
// client stays the registry's (do not close it).
func (r *Registry) Get(name string) (Driver, *nodeclient.Client, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.drivers[name]
	if !ok {
		return Driver{}, nil, false
	}
	return e.Driver, e.client, true
}

// Close closes the connections to all drivers.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.drivers {
		e.client.Close()
	}
	r.drivers = nil
}
