// Package kubeversion makes the embedded upstream components (kube-apiserver's
// /version and discovery, kubectl's client version) tell the Kubernetes
// version podvisor embeds, v1.36.3, instead of upstream's placeholder
// "v0.0.0-master+$Format:%H$".
//
// Upstream release builds set k8s.io/component-base/version's variables with
// -ldflags -X; podvisor is built with a plain `go build`, so this package sets
// them when the program starts. component-base offers SetDynamicVersion, but it
// only accepts versions with the placeholder's major/minor/patch (0.0.0), so
// the variables are reached with go:linkname instead. Importing this package
// (for its init) is enough; it is imported by the packages that run upstream
// code that reports the version.
package kubeversion

import (
	"runtime/debug"
	"strings"
	"sync/atomic"
	_ "unsafe" // go:linkname

	// Imported so that its init (which copies gitVersion into
	// dynamicGitVersion) runs before ours.
	_ "k8s.io/component-base/version"

	"github.com/podvisor/podvisor/internal/cli/version"
)

//go:linkname gitMajor k8s.io/component-base/version.gitMajor
var gitMajor string

//go:linkname gitMinor k8s.io/component-base/version.gitMinor
var gitMinor string

//go:linkname gitVersion k8s.io/component-base/version.gitVersion
var gitVersion string

//go:linkname gitCommit k8s.io/component-base/version.gitCommit
var gitCommit string

//go:linkname gitTreeState k8s.io/component-base/version.gitTreeState
var gitTreeState string

//go:linkname buildDate k8s.io/component-base/version.buildDate
var buildDate string

//go:linkname dynamicGitVersion k8s.io/component-base/version.dynamicGitVersion
var dynamicGitVersion atomic.Value

// Stamp is what the upstream build would pass with -ldflags -X.
type Stamp struct {
	Major, Minor, GitVersion, GitCommit, GitTreeState, BuildDate string
}

// For returns the stamp for Kubernetes version kube (vMAJOR.MINOR.PATCH) and
// podvisor version pv: the Kubernetes version with podvisor's in the semver
// build metadata (as the node's kubeletVersion), and podvisor's commit from
// the Go build info when the binary was built from a git checkout.
func For(kube, pv string, bi *debug.BuildInfo) Stamp {
	s := Stamp{GitVersion: kube + "+podvisor-" + strings.TrimPrefix(pv, "v"), BuildDate: "1970-01-01T00:00:00Z"}
	parts := strings.SplitN(strings.TrimPrefix(kube, "v"), ".", 3)
	if len(parts) >= 2 {
		s.Major, s.Minor = parts[0], parts[1]
	}
	if bi == nil {
		return s
	}
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			s.GitCommit = kv.Value
		case "vcs.modified":
			s.GitTreeState = "clean"
			if kv.Value == "true" {
				s.GitTreeState = "dirty"
			}
		case "vcs.time":
			// The commit's time: the nearest reproducible stand-in
			// for a build date.
			s.BuildDate = kv.Value
		}
	}
	return s
}

func init() {
	bi, _ := debug.ReadBuildInfo()
	s := For(version.Kubernetes, version.Version, bi)
	gitMajor, gitMinor, gitVersion = s.Major, s.Minor, s.GitVersion
	gitCommit, gitTreeState, buildDate = s.GitCommit, s.GitTreeState, s.BuildDate
	dynamicGitVersion.Store(s.GitVersion)
}
