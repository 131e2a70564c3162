package main

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	// kubectl version's client version: v1.36.3, not upstream's placeholder.
	_ "github.com/podvisor/podvisor/internal/cluster/kubeversion"
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
			dir = configDataDir()
		}
		os.Setenv("KUBECONFIG", datadir.AdminKubeconfig(dir))
	}
	os.Args = append([]string{"kubectl"}, args...)
	os.Exit(cli.Run(kubectlcmd.NewDefaultKubectlCommand()))
}

// configDataDir is the config file's data-dir (kubectl's own flags leave no
// room for --config-file: $PODVISOR_CONFIG_FILE or the default file), else
// the default data dir.
func configDataDir() string {
	dir, err := dataDirFromConfig("")
	if err != nil {
		fmt.Fprintf(os.Stderr, "podvisor kubectl: %v\n", err)
		os.Exit(1)
	}
	return dir
}
