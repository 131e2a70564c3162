// Package eviction is node-pressure eviction as the kubelet does it: signals
// compared with thresholds from KubeletConfiguration, node conditions with a
// transition period, ranking of pods, the messages of evicted and refused
// pods, and per-pod local storage limits. The files without I/O (thresholds,
// decide, rank, localstorage, admit, messages) are pure; measure.go and
// manager.go are the shell.
package eviction

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Signal names a measured quantity, as in evictionHard.
type Signal string

// The signals podvisor observes. The process runtime has no image
// filesystem, so imagefs and containerfs are the node filesystem, as the
// kubelet does when they share one.
const (
	MemoryAvailable      Signal = "memory.available"
	NodeFsAvailable      Signal = "nodefs.available"
	NodeFsInodesFree     Signal = "nodefs.inodesFree"
	ImageFsAvailable     Signal = "imagefs.available"
	ImageFsInodesFree    Signal = "imagefs.inodesFree"
	ContainerFsAvailable Signal = "containerfs.available"
	ContainerFsInodes    Signal = "containerfs.inodesFree"
	PIDAvailable         Signal = "pid.available"
)

// Resources the kubelet names in messages for inodes and pids.
const (
	resourceInodes v1.ResourceName = "inodes"
	resourcePids   v1.ResourceName = "pids"
)

var signalResource = map[Signal]v1.ResourceName{
	MemoryAvailable:      v1.ResourceMemory,
	NodeFsAvailable:      v1.ResourceEphemeralStorage,
	NodeFsInodesFree:     resourceInodes,
	ImageFsAvailable:     v1.ResourceEphemeralStorage,
	ImageFsInodesFree:    resourceInodes,
	ContainerFsAvailable: v1.ResourceEphemeralStorage,
	ContainerFsInodes:    resourceInodes,
	PIDAvailable:         resourcePids,
}

var signalCondition = map[Signal]v1.NodeConditionType{
	MemoryAvailable:      v1.NodeMemoryPressure,
	NodeFsAvailable:      v1.NodeDiskPressure,
	NodeFsInodesFree:     v1.NodeDiskPressure,
	ImageFsAvailable:     v1.NodeDiskPressure,
	ImageFsInodesFree:    v1.NodeDiskPressure,
	ContainerFsAvailable: v1.NodeDiskPressure,
	ContainerFsInodes:    v1.NodeDiskPressure,
	PIDAvailable:         v1.NodePIDPressure,
}

// DefaultHard is upstream's evictionHard when the file sets none.
var DefaultHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// Value is a threshold or a minimum reclaim: a quantity, or a fraction of
// the capacity (0.1 for 10%).
type Value struct {
	Quantity   *resource.Quantity
	Percentage float32
}

// Of is the value as a quantity of a resource with capacity (bytes, inodes
// or pids), as upstream's GetThresholdQuantity.
func (v Value) Of(capacity int64) resource.Quantity {
	if v.Quantity != nil {
		return v.Quantity.DeepCopy()
	}
	return *resource.NewQuantity(int64(float64(capacity)*float64(v.Percentage)), resource.BinarySI)
}

// Threshold is "signal < value". GracePeriod 0 is a hard threshold (as
// upstream, a soft one with a zero grace period acts as a hard one).
type Threshold struct {
	Signal      Signal
	Value       Value
	GracePeriod time.Duration
	MinReclaim  *Value
}

// Hard reports whether eviction follows the threshold at once.
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

// Settings are the eviction fields of KubeletConfiguration, parsed.
type Settings struct {
	Thresholds               []Threshold
	PressureTransitionPeriod time.Duration
	MaxPodGracePeriodSeconds int64
}

// ParseThresholds turns evictionHard, evictionSoft, evictionSoftGracePeriod
// and evictionMinimumReclaim into thresholds, with upstream's rules and
// errors: every soft threshold needs a grace period, 0% and 100% disable a
// signal, a quantity must be positive. Hard thresholds come first, each list
// in signal order so that the result does not depend on map order.
func ParseThresholds(hard, soft, softGrace, minReclaim map[string]string) ([]Threshold, error) {
	hs, err := parseStatements(hard)
	if err != nil {
		return nil, err
	}
	ss, err := parseStatements(soft)
	if err != nil {
		return nil, err
	}
	graces := map[Signal]time.Duration{}
	for _, k := range sortedKeys(softGrace) {
		s := Signal(k)
		if !validSignal(s) {
			return nil, fmt.Errorf("unsupported eviction signal %v", s)
		}
		d, err := time.ParseDuration(softGrace[k])
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, fmt.Errorf("invalid eviction grace period specified: %v, must be a positive value", softGrace[k])
		}
		graces[s] = d
	}
	for i := range ss {
		d, ok := graces[ss[i].Signal]
		if !ok {
			return nil, fmt.Errorf("grace period must be specified for the soft eviction threshold %v", ss[i].Signal)
		}
		ss[i].GracePeriod = d
	}
	reclaims := map[Signal]Value{}
	for _, k := range sortedKeys(minReclaim) {
		s, val := Signal(k), minReclaim[k]
		if !validSignal(s) {
			return nil, fmt.Errorf("unsupported eviction signal %v", s)
		}
		if strings.HasSuffix(val, "%") {
			p, err := parsePercentage(val)
			if err != nil {
				return nil, err
			}
			if p <= 0 {
				return nil, fmt.Errorf("eviction percentage minimum reclaim %v must be positive: %s", s, val)
			}
			reclaims[s] = Value{Percentage: p}
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, err
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("negative eviction minimum reclaim specified for %v", s)
		}
		reclaims[s] = Value{Quantity: &q}
	}
	out := append(hs, ss...)
	for i := range out {
		if r, ok := reclaims[out[i].Signal]; ok {
			out[i].MinReclaim = &r
		}
	}
	return out, nil
}

func parseStatements(m map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, k := range sortedKeys(m) {
		s, val := Signal(k), m[k]
		if !validSignal(s) {
			return nil, fmt.Errorf("unsupported eviction signal %v", s)
		}
		if strings.HasSuffix(val, "%") {
			if val == "0%" || val == "100%" { // disables the signal, as upstream
				continue
			}
			p, err := parsePercentage(val)
			if err != nil {
				return nil, err
			}
			if p < 0 {
				return nil, fmt.Errorf("eviction percentage threshold %v must be >= 0%%: %s", s, val)
			}
			if p > 1 {
				return nil, fmt.Errorf("eviction percentage threshold %v must be <= 100%%: %s", s, val)
			}
			out = append(out, Threshold{Signal: s, Value: Value{Percentage: p}})
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, err
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("eviction threshold %v must be positive: %s", s, &q)
		}
		out = append(out, Threshold{Signal: s, Value: Value{Quantity: &q}})
	}
	return out, nil
}

func parsePercentage(s string) (float32, error) {
	v, err := strconv.ParseFloat(strings.TrimRight(s, "%"), 32)
	if err != nil {
		return 0, err
	}
	return float32(v) / 100, nil
}

func validSignal(s Signal) bool { _, ok := signalResource[s]; return ok }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// HardReserve is what allocatable leaves out for the hard thresholds of
// memory.available and nodefs.available, as the kubelet's node allocatable.
func HardReserve(ts []Threshold, r v1.ResourceName, capacity int64) int64 {
	sig := MemoryAvailable
	if r == v1.ResourceEphemeralStorage {
		sig = NodeFsAvailable
	}
	for _, t := range ts {
		if t.Signal == sig && t.Hard() {
			q := t.Value.Of(capacity)
			return q.Value()
		}
	}
	return 0
}
