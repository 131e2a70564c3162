// Package csinode keeps this node's CSINode object (storage.k8s.io/v1) as
// the kubelet's node info manager does: one entry per registered CSI driver
// with the node ID, topology keys and volume limit the driver reported. The
// scheduler and the external provisioner/attacher read it. The decisions
// are pure (this file); csinode.go is the API shell.
package csinode

import (
	"math"
	"slices"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Driver is a driver's entry as NodeGetInfo described it.
func Driver(name, nodeID string, maxVolumes int64, topology map[string]string) storagev1.CSINodeDriver {
	d := storagev1.CSINodeDriver{Name: name, NodeID: nodeID, TopologyKeys: sets.List(sets.KeySet(topology))}
	// A limit of 0 means none; one past int32 is capped, as upstream. A
	// negative limit is a driver bug and is not written.
	if maxVolumes > 0 {
		n := int32(min(maxVolumes, math.MaxInt32))
		d.Allocatable = &storagev1.VolumeNodeResources{Count: &n}
	}
	return d
}

// WithDriver returns the drivers with d put in place of any entry of the
// same name (at the end, as upstream), and whether that changed anything.
func WithDriver(drivers []storagev1.CSINodeDriver, d storagev1.CSINodeDriver) ([]storagev1.CSINodeDriver, bool) {
	i := slices.IndexFunc(drivers, func(x storagev1.CSINodeDriver) bool { return x.Name == d.Name })
	if i >= 0 && same(drivers[i], d) {
		return drivers, false
	}
	out := make([]storagev1.CSINodeDriver, 0, len(drivers)+1)
	for _, x := range drivers {
		if x.Name != d.Name {
			out = append(out, x)
		}
	}
	return append(out, d), true
}

// WithoutDriver returns the drivers without the named one, and whether it
// was there.
func WithoutDriver(drivers []storagev1.CSINodeDriver, name string) ([]storagev1.CSINodeDriver, bool) {
	out := slices.DeleteFunc(slices.Clone(drivers), func(x storagev1.CSINodeDriver) bool { return x.Name == name })
	return out, len(out) != len(drivers)
}

// same compares what the node writes: node ID, topology keys (as a set)
// and the allocatable count.
func same(a, b storagev1.CSINodeDriver) bool {
	return a.NodeID == b.NodeID &&
		sets.New(a.TopologyKeys...).Equal(sets.New(b.TopologyKeys...)) &&
		count(a) == count(b)
}

func count(d storagev1.CSINodeDriver) int64 {
	if d.Allocatable == nil || d.Allocatable.Count == nil {
		return -1
	}
	return int64(*d.Allocatable.Count)
}
