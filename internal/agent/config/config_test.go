package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n"

func TestNoFileGivesDefaults(t *testing.T) {
	cfg, ignored, err := Load("")
	if err != nil || ignored != nil || !reflect.DeepEqual(cfg, Default()) {
		t.Fatalf("Load(\"\") = %+v, %v, %v", cfg, ignored, err)
	}
	if cfg.MaxPods != 110 || cfg.MaxContainerRestartPeriod != 300*time.Second {
		t.Errorf("defaults = %+v", cfg)
	}
}

func TestImplementedFieldsApply(t *testing.T) {
	cfg, ignored, err := Load(write(t, header+`maxPods: 42
crashLoopBackOff:
  maxContainerRestartPeriod: 5s
shutdownGracePeriod: 20s
shutdownGracePeriodCriticalPods: 10s
`))
	if err != nil || len(ignored) != 0 {
		t.Fatalf("err %v, ignored %v", err, ignored)
	}
	if cfg.MaxPods != 42 || cfg.MaxContainerRestartPeriod != 5*time.Second ||
		cfg.ShutdownGracePeriod != 20*time.Second || cfg.ShutdownGracePeriodCriticalPods != 10*time.Second {
		t.Errorf("cfg = %+v", cfg)
	}
	cfg, _, err = Load(write(t, header+"imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [registry.k8s.io/*]\n"))
	if err != nil || cfg.ImageVerification.Policy != "NeverVerifyAllowlistedImages" || len(cfg.ImageVerification.Allowlist) != 1 {
		t.Errorf("image verification: %+v, %v", cfg.ImageVerification, err)
	}
}

func TestUnimplementedFieldsAreNamedSorted(t *testing.T) {
	_, ignored, err := Load(write(t, header+"staticPodPath: /etc/k8s\nregistryPullQPS: 9\nmaxPods: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"registryPullQPS", "staticPodPath"}; !reflect.DeepEqual(ignored, want) {
		t.Errorf("ignored = %v, want %v", ignored, want)
	}
}

func TestBadFiles(t *testing.T) {
	for name, tc := range map[string]struct{ body, want string }{
		"not yaml":            {"maxPods: [1\n", "not YAML or JSON"},
		"empty":               {"", "empty file"},
		"wrong kind":          {"kind: Pod\napiVersion: v1\n", "want kind KubeletConfiguration"},
		"unknown field typo":  {header + "maxPodz: 3\n", "unknown field"},
		"wrong type":          {header + "maxPods: many\n", "maxPods"},
		"back-off cap > 300s": {header + "crashLoopBackOff:\n  maxContainerRestartPeriod: 301s\n", "between 1s and 300s"},
		"back-off cap < 1s":   {header + "crashLoopBackOff:\n  maxContainerRestartPeriod: 500ms\n", "between 1s and 300s"},
		"critical > total":    {header + "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n", "must not exceed"},
		"both shutdown forms": {header + "shutdownGracePeriod: 10s\nshutdownGracePeriodByPodPriority:\n- priority: 1\n  shutdownGracePeriodSeconds: 5\n", "must be empty"},
		"parallel pulls 0":    {header + "serializeImagePulls: false\nmaxParallelImagePulls: 0\n", "maxParallelImagePulls 0 must be a positive number"},
		"parallel but serial": {header + "maxParallelImagePulls: 3\n", "maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls"},
		"log max size":        {header + "containerLogMaxSize: lots\n", `failed to parse container log max size "lots"`},
		"log max files 1":     {header + "containerLogMaxFiles: 1\n", "containerLogMaxFiles must be greater than 1"},
		"log workers 0":       {header + "containerLogMaxWorkers: 0\n", "containerLogMaxWorkers must be greater than or equal to 1"},
		"log interval 1s":     {header + "containerLogMonitorInterval: 1s\n", "greater than or equal to 3s"},
		"verify policy":       {header + "imagePullCredentialsVerificationPolicy: Sometimes\n", `imagePullCredentialsVerificationPolicy "Sometimes"`},
		"allowlist, policy":   {header + "preloadedImagesVerificationAllowlist: [registry.k8s.io/pause]\n", "preloadedImagesVerificationAllowlist"},
		"allowlist with tag":  {header + "imagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: [busybox:1]\n", `"busybox:1" is not an image repository`},
	} {
		t.Run(name, func(t *testing.T) {
			path := write(t, tc.body)
			_, _, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %v, want it to name %s and mention %q", err, path, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
	if _, _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("a missing file must be an error")
	}
}

// As the kubelet: an evictionHard that is set replaces upstream's defaults,
// unless mergeDefaultEvictionSettings; unset it is the defaults.
func TestEvictionHardReplacesOrMergesDefaults(t *testing.T) {
	head := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for _, tc := range []struct {
		body string
		want int
	}{
		{"", 5},
		{"evictionHard:\n  pid.available: \"100\"\n", 1},
		{"evictionHard:\n  pid.available: \"100\"\nmergeDefaultEvictionSettings: true\n", 6},
		{"evictionHard:\n  memory.available: 1Gi\nmergeDefaultEvictionSettings: true\nevictionSoft:\n  nodefs.available: 20%\nevictionSoftGracePeriod:\n  nodefs.available: 1m\n", 6},
	} {
		cfg, ignored, err := Load(write(t, head+tc.body+"maxPods: 10\n"))
		if err != nil || len(ignored) != 0 {
			t.Fatalf("%q: err %v, ignored %v", tc.body, err, ignored)
		}
		if got := len(cfg.Eviction.Thresholds); got != tc.want {
			t.Errorf("%q: %d thresholds, want %d", tc.body, got, tc.want)
		}
		if cfg.Eviction.PressureTransitionPeriod != 5*time.Minute {
			t.Errorf("transition period %s, want the 5m default", cfg.Eviction.PressureTransitionPeriod)
		}
	}
	if _, _, err := Load(write(t, head+"evictionSoft:\n  memory.available: 1Gi\n")); err == nil || !strings.Contains(err.Error(), "grace period must be specified") {
		t.Errorf("soft without grace: %v", err)
	}
}

// Image pulls: serialized by default; serializeImagePulls false without a
// bound pulls everything at once (-1); maxParallelImagePulls bounds them.
func TestParallelImagePulls(t *testing.T) {
	for _, tc := range []struct {
		body string
		want int
	}{
		{"", 1},
		{"serializeImagePulls: true\n", 1},
		{"maxParallelImagePulls: 1\n", 1},
		{"serializeImagePulls: false\n", -1},
		{"serializeImagePulls: false\nmaxParallelImagePulls: 5\n", 5},
	} {
		cfg, ignored, err := Load(write(t, header+tc.body+"maxPods: 10\n"))
		if err != nil || len(ignored) != 0 {
			t.Fatalf("%q: %v, ignored %v", tc.body, err, ignored)
		}
		if got := cfg.ParallelImagePulls(); got != tc.want {
			t.Errorf("%q: ParallelImagePulls() = %d, want %d", tc.body, got, tc.want)
		}
	}
	if got := Default().ParallelImagePulls(); got != 1 {
		t.Errorf("without a file: %d, want 1 (serialized)", got)
	}
}

// Container log rotation: the kubelet's defaults (10Mi, 5 files, 1 worker,
// 10s) and the fields as set; a negative size is kept (rotation off).
func TestContainerLogRotation(t *testing.T) {
	d := Default()
	if d.ContainerLogMaxSize != 10<<20 || d.ContainerLogMaxFiles != 5 || d.ContainerLogMaxWorkers != 1 || d.ContainerLogMonitorInterval != 10*time.Second {
		t.Errorf("defaults = %d %d %d %s", d.ContainerLogMaxSize, d.ContainerLogMaxFiles, d.ContainerLogMaxWorkers, d.ContainerLogMonitorInterval)
	}
	for _, tc := range []struct {
		body    string
		size    int64
		files   int32
		workers int32
		every   time.Duration
	}{
		{"", 10 << 20, 5, 1, 10 * time.Second},
		{"containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\n", 1 << 20, 3, 1, 10 * time.Second},
		{"containerLogMaxSize: 500k\ncontainerLogMaxWorkers: 4\ncontainerLogMonitorInterval: 3s\n", 500000, 5, 4, 3 * time.Second},
		{"containerLogMaxSize: \"-1\"\n", -1, 5, 1, 10 * time.Second},
	} {
		cfg, ignored, err := Load(write(t, header+tc.body+"maxPods: 10\n"))
		if err != nil || len(ignored) != 0 {
			t.Fatalf("%q: %v, ignored %v", tc.body, err, ignored)
		}
		if cfg.ContainerLogMaxSize != tc.size || cfg.ContainerLogMaxFiles != tc.files ||
			cfg.ContainerLogMaxWorkers != tc.workers || cfg.ContainerLogMonitorInterval != tc.every {
			t.Errorf("%q: got %d %d %d %s", tc.body, cfg.ContainerLogMaxSize, cfg.ContainerLogMaxFiles, cfg.ContainerLogMaxWorkers, cfg.ContainerLogMonitorInterval)
		}
	}
}

func TestProfilingHandler(t *testing.T) {
	for _, tt := range []struct {
		file string
		want bool
	}{
		{"", true},
		{"enableProfilingHandler: true\n", true},
		{"enableProfilingHandler: false\n", false},
		{"enableDebuggingHandlers: false\n", false},
		{"enableDebuggingHandlers: false\nenableProfilingHandler: true\n", false},
	} {
		cfg, ignored, err := Load(write(t, header+tt.file))
		if err != nil || len(ignored) != 0 || cfg.ProfilingHandler != tt.want {
			t.Errorf("%q: ProfilingHandler %v (ignored %v, %v), want %v", tt.file, cfg.ProfilingHandler, ignored, err, tt.want)
		}
	}
}
