package containerd

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/containerd/containerd/v2/cmd/containerd/command"
	"github.com/containerd/containerd/v2/version"
)

// Main runs containerd itself, in the foreground, with the plugins of
// plugins.go: podvisor's hidden `podvisor containerd ARGS` subcommand, which
// Start runs as a child process. It returns the exit code.
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
