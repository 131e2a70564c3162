package config

import (
	"fmt"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/podvisor/podvisor/internal/agent/imagegc"
)

// defaultImageGC is the kubelet's (v1beta1 defaults).
var defaultImageGC = imagegc.Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}

// applyImageGC reads the image GC fields with the kubelet's defaults (an
// unset or zero imageMinimumGCAge is 2m) and validation texts.
func applyImageGC(cfg *Config, kc *kubeletv1beta1.KubeletConfiguration) error {
	p := defaultImageGC
	if kc.ImageGCHighThresholdPercent != nil {
		p.HighThresholdPercent = int(*kc.ImageGCHighThresholdPercent)
	}
	if kc.ImageGCLowThresholdPercent != nil {
		p.LowThresholdPercent = int(*kc.ImageGCLowThresholdPercent)
	}
	if d := kc.ImageMinimumGCAge.Duration; d != 0 {
		p.MinAge = d
	}
	p.MaxAge = kc.ImageMaximumGCAge.Duration
	switch {
	case p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100:
		return fmt.Errorf("invalid configuration: imageGCHighThresholdPercent (--image-gc-high-threshold) %v must be between 0 and 100, inclusive", p.HighThresholdPercent)
	case p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100:
		return fmt.Errorf("invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) %v must be between 0 and 100, inclusive", p.LowThresholdPercent)
	case p.LowThresholdPercent >= p.HighThresholdPercent:
		return fmt.Errorf("invalid configuration: imageGCLowThresholdPercent (--image-gc-low-threshold) %v must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) %v", p.LowThresholdPercent, p.HighThresholdPercent)
	case p.MinAge < 0:
		return fmt.Errorf("invalid configuration: imageMinimumGCAge %v must not be negative", p.MinAge)
	case p.MaxAge < 0:
		return fmt.Errorf("invalid configuration: imageMaximumGCAge %v must not be negative", p.MaxAge)
	case p.MaxAge > 0 && p.MaxAge <= p.MinAge:
		return fmt.Errorf("invalid configuration: imageMaximumGCAge %v must be greater than imageMinimumGCAge %v", p.MaxAge, p.MinAge)
	}
	cfg.ImageGC = p
	return nil
}
