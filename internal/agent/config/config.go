// Package config reads the agent's configuration file, which is the upstream
// KubeletConfiguration (kubelet.config.k8s.io/v1beta1): operators already know it.
package config

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/internal/agent/eviction"
	"github.com/podvisor/podvisor/internal/agent/imagegc"
	"github.com/podvisor/podvisor/internal/agent/images"
	"github.com/podvisor/podvisor/internal/agent/podsecurity"
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
	// ResolvConf is the node's resolv.conf that pods with dnsPolicy Default
	// (and the search domains of ClusterFirst) start from; "": none.
	ResolvConf string
	// SeccompDefault: containers without a seccomp profile get the
	// runtime's default one instead of none.
	SeccompDefault bool
	// AllowedUnsafeSysctls are admitted besides the safe sysctls (names, or
	// prefixes ending in "*"); Sysctls is the resulting allowlist.
	AllowedUnsafeSysctls []string
	Sysctls              *podsecurity.Allowlist
	// Eviction: evictionHard (upstream's defaults when unset; merged with
	// them under mergeDefaultEvictionSettings), evictionSoft and its grace
	// periods, evictionMinimumReclaim, evictionMaxPodGracePeriod,
	// evictionPressureTransitionPeriod (default 5m), localStorageCapacityIsolation.
	Eviction eviction.Settings
	// LocalStorageCapacityIsolation enforces ephemeral-storage limits and
	// emptyDir sizeLimit by eviction (default true).
	LocalStorageCapacityIsolation bool
	// EvictionMonitoringPeriod is not in the file (upstream has it fixed at
	// 10 s); podvisor's --eviction-monitoring-period sets it for tests.
	EvictionMonitoringPeriod time.Duration
	// SerializeImagePulls (default true) pulls one image at a time; when
	// false, MaxParallelImagePulls bounds the pulls at once (0: unset, no
	// bound), as the kubelet's image puller.
	SerializeImagePulls   bool
	MaxParallelImagePulls int32
	// ImageVerification is imagePullCredentialsVerificationPolicy (default
	// NeverVerifyPreloadedImages) with preloadedImagesVerificationAllowlist:
	// which present images a pod may use only with the credentials they
	// were pulled with (KubeletEnsureSecretPulledImages).
	ImageVerification images.Verification
	// ImageGC: imageGCHighThresholdPercent (85), imageGCLowThresholdPercent
	// (80), imageMinimumGCAge (2m), imageMaximumGCAge (0: off), with the
	// kubelet's validation (gc.go).
	ImageGC imagegc.Policy
	// GCPeriod is not in the file: podvisor's --gc-period sets, for tests,
	// the time between image and container GC rounds (0: the kubelet's
	// 5m and 1m).
	GCPeriod time.Duration
	// ContainerRuntimeEndpoint is an existing CRI runtime to use instead of
	// podvisor's own containerd; empty: none (--container-runtime-endpoint
	// overrides it).
	ContainerRuntimeEndpoint string
	// Container log rotation, as the kubelet's container log manager:
	// ContainerLogMaxSize in bytes (containerLogMaxSize, default 10Mi; a
	// negative quantity turns rotation off), ContainerLogMaxFiles (default
	// 5, current file included), ContainerLogMaxWorkers (default 1),
	// ContainerLogMonitorInterval (default 10s, at least 3s).
	ContainerLogMaxSize         int64
	ContainerLogMaxFiles        int32
	ContainerLogMaxWorkers      int32
	ContainerLogMonitorInterval time.Duration
	// ProfilingHandler serves Go's profiles under /debug/pprof/ on the
	// agent API (authorized as nodes/proxy): enableDebuggingHandlers and
	// enableProfilingHandler, both true by default as the kubelet's.
	ProfilingHandler bool
}

// implemented lists the top-level fields podvisor honours; any other field set
// in the file is named in one warning line at start-up.
var implemented = map[string]bool{
	"kind": true, "apiVersion": true,
	"maxPods": true, "crashLoopBackOff": true,
	"nodeStatusUpdateFrequency": true, "nodeStatusReportFrequency": true, "nodeLeaseDurationSeconds": true,
	"shutdownGracePeriod": true, "shutdownGracePeriodCriticalPods": true, "shutdownGracePeriodByPodPriority": true,
	"clusterDomain": true, "clusterDNS": true, "resolvConf": true, "seccompDefault": true, "allowedUnsafeSysctls": true,
	"evictionHard": true, "evictionSoft": true, "evictionSoftGracePeriod": true, "evictionMinimumReclaim": true,
	"evictionMaxPodGracePeriod": true, "evictionPressureTransitionPeriod": true, "mergeDefaultEvictionSettings": true,
	"localStorageCapacityIsolation": true, "containerRuntimeEndpoint": true,
	"serializeImagePulls": true, "maxParallelImagePulls": true,
	"imagePullCredentialsVerificationPolicy": true, "preloadedImagesVerificationAllowlist": true,
	"containerLogMaxSize": true, "containerLogMaxFiles": true, "containerLogMaxWorkers": true, "containerLogMonitorInterval": true,
	"imageGCHighThresholdPercent": true, "imageGCLowThresholdPercent": true, "imageMinimumGCAge": true, "imageMaximumGCAge": true,
	"enableDebuggingHandlers": true, "enableProfilingHandler": true,
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
		ResolvConf:                "/etc/resolv.conf",
		Eviction:                  defaultEviction(),
		Sysctls:                   safeSysctls(),
		EvictionMonitoringPeriod:  10 * time.Second,
		SerializeImagePulls:       true,
		ImageVerification:         images.Verification{Policy: images.NeverVerifyPreloadedImages},
		ImageGC:                   defaultImageGC,

		ContainerLogMaxSize:         10 << 20,
		ContainerLogMaxFiles:        5,
		ContainerLogMaxWorkers:      1,
		ContainerLogMonitorInterval: 10 * time.Second,

		LocalStorageCapacityIsolation: true,
		ProfilingHandler:              true,
	}
}

func safeSysctls() *podsecurity.Allowlist {
	a, err := podsecurity.NewAllowlist(nil)
	if err != nil {
		panic(err) // the safe list is a constant
	}
	return a
}

func defaultEviction() eviction.Settings {
	ts, err := eviction.ParseThresholds(eviction.DefaultHard, nil, nil, nil)
	if err != nil {
		panic(err) // the defaults are constants
	}
	return eviction.Settings{Thresholds: ts, PressureTransitionPeriod: 5 * time.Minute}
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
	cfg.ContainerRuntimeEndpoint = kc.ContainerRuntimeEndpoint
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
	if kc.ResolverConfig != nil {
		cfg.ResolvConf = *kc.ResolverConfig
	}
	cfg.SeccompDefault = kc.SeccompDefault != nil && *kc.SeccompDefault
	cfg.AllowedUnsafeSysctls = kc.AllowedUnsafeSysctls
	var err error
	if cfg.Sysctls, err = podsecurity.NewAllowlist(kc.AllowedUnsafeSysctls); err != nil {
		return fmt.Errorf("allowedUnsafeSysctls: %v", err)
	}
	if kc.LocalStorageCapacityIsolation != nil {
		cfg.LocalStorageCapacityIsolation = *kc.LocalStorageCapacityIsolation
	}
	// As the kubelet: the profiles are among the debugging handlers.
	cfg.ProfilingHandler = (kc.EnableDebuggingHandlers == nil || *kc.EnableDebuggingHandlers) &&
		(kc.EnableProfilingHandler == nil || *kc.EnableProfilingHandler)
	if err := applyImagePulls(cfg, kc); err != nil {
		return err
	}
	if err := applyContainerLogs(cfg, kc); err != nil {
		return err
	}
	if err := applyImageGC(cfg, kc); err != nil {
		return err
	}
	return applyEviction(cfg, kc)
}

// applyImagePulls: serializeImagePulls defaults to true; the kubelet's
// validation texts.
func applyImagePulls(cfg *Config, kc *kubeletv1beta1.KubeletConfiguration) error {
	if kc.SerializeImagePulls != nil {
		cfg.SerializeImagePulls = *kc.SerializeImagePulls
	}
	if p := kc.MaxParallelImagePulls; p != nil {
		if *p < 1 {
			return fmt.Errorf("invalid configuration: maxParallelImagePulls %v must be a positive number", *p)
		}
		if cfg.SerializeImagePulls && *p > 1 {
			return fmt.Errorf("invalid configuration: maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false")
		}
		cfg.MaxParallelImagePulls = *p
	}
	policy, err := images.ParseVerificationPolicy(string(kc.ImagePullCredentialsVerificationPolicy))
	if err != nil {
		return err
	}
	allow := kc.PreloadedImagesVerificationAllowlist
	if len(allow) > 0 && policy != images.NeverVerifyAllowlistedImages {
		return fmt.Errorf("invalid configuration: can't set `preloadedImagesVerificationAllowlist` if `imagePullCredentialsVerificationPolicy` is not \"NeverVerifyAllowlistedImages\"")
	}
	if err := images.ValidateAllowlist(allow); err != nil {
		return err
	}
	cfg.ImageVerification = images.Verification{Policy: policy, Allowlist: allow}
	return nil
}

// ParallelImagePulls is how many image pulls may run at once on the node:
// 1 when serialized, else maxParallelImagePulls, or -1 for no bound when it
// is unset (the kubelet's parallel puller without a limit).
func (c Config) ParallelImagePulls() int {
	switch {
	case c.SerializeImagePulls:
		return 1
	case c.MaxParallelImagePulls > 0:
		return int(c.MaxParallelImagePulls)
	}
	return -1
}

// applyContainerLogs: the kubelet's defaults, parsing and validation texts.
func applyContainerLogs(cfg *Config, kc *kubeletv1beta1.KubeletConfiguration) error {
	if kc.ContainerLogMaxSize != "" {
		q, err := resource.ParseQuantity(kc.ContainerLogMaxSize)
		if err != nil {
			return fmt.Errorf("failed to parse container log max size %q: %v", kc.ContainerLogMaxSize, err)
		}
		n, ok := q.AsInt64()
		if !ok {
			return fmt.Errorf("failed to parse container log max size %q: invalid max log size", kc.ContainerLogMaxSize)
		}
		cfg.ContainerLogMaxSize = n
	}
	if kc.ContainerLogMaxFiles != nil {
		if *kc.ContainerLogMaxFiles <= 1 {
			return fmt.Errorf("invalid configuration: containerLogMaxFiles must be greater than 1")
		}
		cfg.ContainerLogMaxFiles = *kc.ContainerLogMaxFiles
	}
	if kc.ContainerLogMaxWorkers != nil {
		if *kc.ContainerLogMaxWorkers < 1 {
			return fmt.Errorf("invalid configuration: containerLogMaxWorkers must be greater than or equal to 1")
		}
		cfg.ContainerLogMaxWorkers = *kc.ContainerLogMaxWorkers
	}
	if d := kc.ContainerLogMonitorInterval; d != nil {
		if d.Duration < 3*time.Second {
			return fmt.Errorf("invalid configuration: containerLogMonitorInterval must be a positive time duration greater than or equal to 3s")
		}
		cfg.ContainerLogMonitorInterval = d.Duration
	}
	return nil
}

// applyEviction: as the kubelet, an evictionHard that is set replaces the
// defaults unless mergeDefaultEvictionSettings is true.
func applyEviction(cfg *Config, kc *kubeletv1beta1.KubeletConfiguration) error {
	hard := kc.EvictionHard
	if hard == nil {
		hard = eviction.DefaultHard
	} else if kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings {
		merged := map[string]string{}
		for k, v := range eviction.DefaultHard {
			merged[k] = v
		}
		for k, v := range hard {
			merged[k] = v
		}
		hard = merged
	}
	ts, err := eviction.ParseThresholds(hard, kc.EvictionSoft, kc.EvictionSoftGracePeriod, kc.EvictionMinimumReclaim)
	if err != nil {
		return err
	}
	cfg.Eviction.Thresholds = ts
	if d := kc.EvictionPressureTransitionPeriod.Duration; d > 0 {
		cfg.Eviction.PressureTransitionPeriod = d
	}
	if kc.EvictionMaxPodGracePeriod < 0 {
		return fmt.Errorf("evictionMaxPodGracePeriod must not be negative, got %d", kc.EvictionMaxPodGracePeriod)
	}
	cfg.Eviction.MaxPodGracePeriodSeconds = int64(kc.EvictionMaxPodGracePeriod)
	return nil
}

func setDuration(dst *time.Duration, d metav1.Duration) {
	if d.Duration > 0 {
		*dst = d.Duration
	}
}

func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }
