// Package config reads the agent's configuration file, which is the upstream
// KubeletConfiguration (kubelet.config.k8s.io/v1beta1): operators already know it.
package config

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Config is the part of KubeletConfiguration podvisor honours, with defaults applied.
type Config struct {
	MaxPods                          int32
	MaxContainerRestartPeriod        time.Duration // crash-loop back-off cap
	NodeStatusUpdateFrequency        time.Duration
	NodeStatusReportFrequency        time.Duration
	NodeLeaseDurationSeconds         int32
	ShutdownGracePeriod              time.Duration
	ShutdownGracePeriodCriticalPods  time.Duration
	ShutdownGracePeriodByPodPriority []kubeletv1beta1.ShutdownGracePeriodByPodPriority
	ClusterDomain                    string
	ClusterDNS                       []string
}

// implemented lists the top-level fields podvisor honours; any other field set
// in the file is named in one warning line at start-up.
var implemented = map[string]bool{
	"kind": true, "apiVersion": true,
	"maxPods": true, "crashLoopBackOff": true,
	"nodeStatusUpdateFrequency": true, "nodeStatusReportFrequency": true, "nodeLeaseDurationSeconds": true,
	"shutdownGracePeriod": true, "shutdownGracePeriodCriticalPods": true, "shutdownGracePeriodByPodPriority": true,
	"clusterDomain": true, "clusterDNS": true,
}

// Default is the configuration used without --config.
func Default() Config {
	return Config{
		MaxPods:                   110,
		MaxContainerRestartPeriod: 300 * time.Second,
		NodeStatusUpdateFrequency: 10 * time.Second,
		NodeStatusReportFrequency: 5 * time.Minute,
		NodeLeaseDurationSeconds:  40,
		ClusterDomain:             "cluster.local",
	}
}

// Load reads path. It returns the configuration, the names of fields that are set
// but not implemented (sorted), and an error naming the problem for a bad file.
func Load(path string) (Config, []string, error) {
	cfg := Default()
	if path == "" {
		return cfg, nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, nil, fmt.Errorf("config %s: %w", path, err)
	}
	var raw map[string]interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return cfg, nil, fmt.Errorf("config %s: not YAML or JSON: %v", path, oneLine(err))
	}
	if raw == nil {
		return cfg, nil, fmt.Errorf("config %s: empty file", path)
	}
	var kc kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(data, &kc); err != nil {
		return cfg, nil, fmt.Errorf("config %s: %v", path, oneLine(err))
	}
	if kc.Kind != "KubeletConfiguration" || kc.APIVersion != kubeletv1beta1.SchemeGroupVersion.String() {
		return cfg, nil, fmt.Errorf("config %s: want kind KubeletConfiguration, apiVersion %s; got kind %q, apiVersion %q",
			path, kubeletv1beta1.SchemeGroupVersion, kc.Kind, kc.APIVersion)
	}
	if err := apply(&cfg, &kc); err != nil {
		return cfg, nil, fmt.Errorf("config %s: %w", path, err)
	}
	var ignored []string
	for k := range raw {
		if !implemented[k] {
			ignored = append(ignored, k)
		}
	}
	sort.Strings(ignored)
	return cfg, ignored, nil
}

func apply(cfg *Config, kc *kubeletv1beta1.KubeletConfiguration) error {
	if kc.MaxPods != 0 {
		if kc.MaxPods < 0 {
			return fmt.Errorf("maxPods must be positive, got %d", kc.MaxPods)
		}
		cfg.MaxPods = kc.MaxPods
	}
	if p := kc.CrashLoopBackOff.MaxContainerRestartPeriod; p != nil {
		if p.Duration < time.Second || p.Duration > 300*time.Second {
			return fmt.Errorf("crashLoopBackOff.maxContainerRestartPeriod must be between 1s and 300s, got %s", p.Duration)
		}
		cfg.MaxContainerRestartPeriod = p.Duration
	}
	setDuration(&cfg.NodeStatusUpdateFrequency, kc.NodeStatusUpdateFrequency)
	setDuration(&cfg.NodeStatusReportFrequency, kc.NodeStatusReportFrequency)
	if kc.NodeLeaseDurationSeconds > 0 {
		cfg.NodeLeaseDurationSeconds = kc.NodeLeaseDurationSeconds
	}
	cfg.ShutdownGracePeriod = kc.ShutdownGracePeriod.Duration
	cfg.ShutdownGracePeriodCriticalPods = kc.ShutdownGracePeriodCriticalPods.Duration
	cfg.ShutdownGracePeriodByPodPriority = kc.ShutdownGracePeriodByPodPriority
	if cfg.ShutdownGracePeriodCriticalPods > cfg.ShutdownGracePeriod {
		return fmt.Errorf("shutdownGracePeriodCriticalPods (%s) must not exceed shutdownGracePeriod (%s)",
			cfg.ShutdownGracePeriodCriticalPods, cfg.ShutdownGracePeriod)
	}
	if len(kc.ShutdownGracePeriodByPodPriority) > 0 && (cfg.ShutdownGracePeriod > 0 || cfg.ShutdownGracePeriodCriticalPods > 0) {
		return fmt.Errorf("shutdownGracePeriodByPodPriority must be empty when shutdownGracePeriod or shutdownGracePeriodCriticalPods is set")
	}
	if kc.ClusterDomain != "" {
		cfg.ClusterDomain = kc.ClusterDomain
	}
	cfg.ClusterDNS = kc.ClusterDNS
	return nil
}

func setDuration(dst *time.Duration, d metav1.Duration) {
	if d.Duration > 0 {
		*dst = d.Duration
	}
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
