package containerd

import (
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/cmd/containerd/command"
)

// Main runs containerd itself, in the foreground, with the plugins of
// plugins.go: podvisor's hidden `podvisor containerd ARGS` subcommand, which
// Start runs as a child process. It returns the exit code.
func Main(args []string) int {
	app := command.App()
	if err := app.Run(append([]string{"containerd"}, args...)); err != nil {
		fmt.Fprintf(os.Stderr, "containerd: %s\n", err)
		return 1
	}
	return 0
}
