package kubeversion

import (
	"runtime/debug"
	"strings"
	"testing"

	componentversion "k8s.io/component-base/version"
)

func TestFor(t *testing.T) {
	vcs := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"},
		{Key: "vcs.modified", Value: "true"},
		{Key: "vcs.time", Value: "2026-11-28T10:00:00Z"},
	}}
	clean := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "false"}}}
	for _, tc := range []struct {
		name string
		kube string
		pv   string
		bi   *debug.BuildInfo
		want Stamp
	}{
		{"no build info", "v1.36.3", "v0.1.0-dev", nil,
			Stamp{Major: "1", Minor: "36", GitVersion: "v1.36.3+podvisor-0.1.0-dev", BuildDate: "1970-01-01T00:00:00Z"}},
		{"git checkout with changes", "v1.36.3", "v0.2.0", vcs,
			Stamp{Major: "1", Minor: "36", GitVersion: "v1.36.3+podvisor-0.2.0", GitCommit: "abc123", GitTreeState: "dirty", BuildDate: "2026-11-28T10:00:00Z"}},
		{"clean tree", "v1.37.0", "v0.1.0", clean,
			Stamp{Major: "1", Minor: "37", GitVersion: "v1.37.0+podvisor-0.1.0", GitTreeState: "clean", BuildDate: "1970-01-01T00:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := For(tc.kube, tc.pv, tc.bi); got != tc.want {
				t.Errorf("For(%q, %q) = %+v, want %+v", tc.kube, tc.pv, got, tc.want)
			}
		})
	}
}

// The stamp reaches what upstream code reads: component-base's Get.
func TestUpstreamGetReportsKubernetesVersion(t *testing.T) {
	got := componentversion.Get()
	if got.Major != "1" || got.Minor != "36" || !strings.HasPrefix(got.GitVersion, "v1.36.3+") {
		t.Errorf("component-base version.Get() = %+v, want 1/36 and v1.36.3+…", got)
	}
}
