package config

import (
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/agent/imagegc"
)

func TestImageGCDefaultsAndFields(t *testing.T) {
	if got, want := Default().ImageGC, (imagegc.Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}); got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
	cfg, ignored, err := Load(write(t, header+"imageGCHighThresholdPercent: 60\nimageGCLowThresholdPercent: 0\nimageMinimumGCAge: 1s\nimageMaximumGCAge: 1h\n"))
	if err != nil || len(ignored) != 0 {
		t.Fatalf("err %v, ignored %v", err, ignored)
	}
	if want := (imagegc.Policy{HighThresholdPercent: 60, LowThresholdPercent: 0, MinAge: time.Second, MaxAge: time.Hour}); cfg.ImageGC != want {
		t.Errorf("ImageGC %+v, want %+v", cfg.ImageGC, want)
	}
	// A zero minimum age is the default, as the kubelet's defaulting.
	if cfg, _, err := Load(write(t, header+"imageMinimumGCAge: 0s\n")); err != nil || cfg.ImageGC.MinAge != 2*time.Minute {
		t.Errorf("imageMinimumGCAge 0: %v, %v", cfg.ImageGC, err)
	}
}

func TestImageGCValidationAsTheKubelet(t *testing.T) {
	for body, want := range map[string]string{
		"imageGCHighThresholdPercent: 101\n":                                "invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) 101 must be between 0 and 100, inclusive",
		"imageGCLowThresholdPercent: -1\n":                                  "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) -1 must be between 0 and 100, inclusive",
		"imageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 70\n": "invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) 70 must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 70",
		"imageMinimumGCAge: -1s\n":                                          "invalid configuration: imageMinimumGCAge -1s must not be negative",
		"imageMaximumGCAge: -1s\n":                                          "invalid configuration: imageMaximumGCAge -1s must not be negative",
		"imageMaximumGCAge: 1m\nimageMinimumGCAge: 2m\n":                    "invalid configuration: imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s",
	} {
		path := write(t, header+body)
		_, _, err := Load(path)
		if err == nil || err.Error() != "config "+path+": "+want {
			t.Errorf("%q: err %v, want %q", body, err, want)
		}
	}
}
