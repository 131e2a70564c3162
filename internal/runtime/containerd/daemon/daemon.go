// Package daemon is containerd itself, with the plugins of plugins.go: the
// podvisor-containerd binary (cmd/podvisor-containerd), which
// internal/runtime/containerd's Start runs as a child process. It is a
// package of its own so that only that binary links containerd's server
// (some 180 packages whose initialisation every process linking them pays
// for): podvisor and podvisor-agent are its clients.
package daemon

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/containerd/containerd/v2/cmd/containerd/command"
	"github.com/containerd/containerd/v2/version"
)

// Main runs containerd in the foreground with the command line args
// (`--config FILE`) and returns its exit code.
func Main(args []string) int {
	setVersion()
	app := command.App()
	if err := app.Run(append([]string{"containerd"}, args...)); err != nil {
		fmt.Fprintf(os.Stderr, "containerd: %s\n", err)
		return 1
	}
	return 0
}

// setVersion reports the containerd module's version (v2.3.6), as a
// release build does, rather than the "2.3.6+unknown" of a build without
// containerd's linker flags: the CRI returns it, and a node shows it as
// containerd://VERSION. (A test binary has no module list: it keeps
// the +unknown.)
func setVersion() {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	for _, d := range bi.Deps {
		if d.Path == version.Package {
			if d.Replace != nil {
				d = d.Replace
			}
			version.Version = d.Version
			return
		}
	}
}
