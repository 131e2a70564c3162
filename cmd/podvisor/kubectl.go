package main

import (
	"os"
	"strings"

	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"

	"github.com/podvisor/podvisor/internal/datadir"
	// kubectl version's client version: v1.36.3, not upstream's placeholder.
	_ "github.com/podvisor/podvisor/internal/kubeversion"
)

// kubectl runs the upstream kubectl, pointed at the local admin kubeconfig
// unless --kubeconfig or KUBECONFIG says otherwise.
func kubectl(args []string) {
	explicit := os.Getenv("KUBECONFIG") != ""
	for _, a := range args {
		if a == "--kubeconfig" || strings.HasPrefix(a, "--kubeconfig=") {
			explicit = true
		}
	}
	if !explicit {
		dir := os.Getenv("PODVISOR_DATA_DIR")
		if dir == "" {
			dir = datadir.Default()
		}
		os.Setenv("KUBECONFIG", datadir.AdminKubeconfig(dir))
	}
	os.Args = append([]string{"kubectl"}, args...)
	os.Exit(cli.Run(kubectlcmd.NewDefaultKubectlCommand()))
}
