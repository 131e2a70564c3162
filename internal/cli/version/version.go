// Package version holds podvisor's own version and the Kubernetes version it embeds.
package version

import "strings"

// Version is podvisor's version; release builds set it with -ldflags -X.
var Version = "v0.1.0-dev"

// Kubernetes is the version of the embedded upstream components.
const Kubernetes = "v1.36.3"

// KubeletVersion is what the node reports as nodeInfo.kubeletVersion.
func KubeletVersion() string { return Kubernetes + "+podvisor-" + strings.TrimPrefix(Version, "v") }
