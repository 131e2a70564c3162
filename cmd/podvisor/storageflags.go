package main

import (
	"flag"

	"github.com/podvisor/podvisor/internal/cli/up"
)

// localStorageFlags are the built-in local-path provisioner's flags (k3s's
// --disable local-storage and --default-local-storage-path). A server has
// no node and so no path of its own.
func localStorageFlags(fs *flag.FlagSet, o *up.LocalStorageOptions, node bool) {
	if node {
		fs.BoolVar(&o.Disable, "disable-local-storage", false, "do not run the built-in local-path provisioner on this node (rancher.io/local-path; on up, no local-path StorageClass either)")
		fs.StringVar(&o.Path, "default-local-storage-path", "", "directory of the volumes the local-path provisioner makes on this node (default DATA_DIR/storage)")
		return
	}
	fs.BoolVar(&o.Disable, "disable-local-storage", false, "do not make the local-path StorageClass (the built-in provisioner of the nodes, rancher.io/local-path)")
}
