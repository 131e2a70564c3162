package agentup

import (
	"flag"
	"time"

	"github.com/podvisor/podvisor/internal/agent/config"
)

// NodeConfigOptions are the flags, shared by `podvisor up` and `podvisor
// agent`, that make the node's KubeletConfiguration.
type NodeConfigOptions struct {
	ConfigFile string // --config: a KubeletConfiguration file
	// EvictionMonitoringPeriod is for tests: between eviction rounds (0: 10 s).
	EvictionMonitoringPeriod time.Duration
	// GCPeriod is for tests: between image and container GC rounds (0: 5m and 1m).
	GCPeriod time.Duration
}

// NodeConfigFlags registers NodeConfigOptions' flags on fs.
func NodeConfigFlags(fs *flag.FlagSet, o *NodeConfigOptions) {
	fs.StringVar(&o.ConfigFile, "config", "", "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1)")
	fs.DurationVar(&o.EvictionMonitoringPeriod, "eviction-monitoring-period", 0, "for tests: time between node-pressure eviction rounds (0: upstream's 10s)")
	fs.DurationVar(&o.GCPeriod, "gc-period", 0, "for tests: time between image and container garbage collection rounds (0: upstream's 5m and 1m)")
}

// LoadNodeConfig reads the config file (defaults without one) and applies
// the test periods; ignored are the file's fields podvisor does not use.
func LoadNodeConfig(o NodeConfigOptions) (kc config.Config, ignored []string, err error) {
	if kc, ignored, err = config.Load(o.ConfigFile); err != nil {
		return kc, nil, err
	}
	if o.EvictionMonitoringPeriod > 0 {
		kc.EvictionMonitoringPeriod = o.EvictionMonitoringPeriod
	}
	kc.GCPeriod = o.GCPeriod
	return kc, ignored, nil
}
