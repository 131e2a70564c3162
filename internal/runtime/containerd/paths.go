package containerd

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
)

// Paths is where one podvisor data directory's containerd keeps its files.
//
// Everything that must outlive a reboot (config, content, snapshots, the
// metadata database, the log) lives in DATA_DIR/containerd. The state
// directory (the gRPC socket, task bundles, runc's state) does not: it lives
// under /run/podvisor, named by a hash of the data directory's absolute path.
// A unix socket path is limited to 108 bytes, and data directories (tests use
// long temporary ones) easily exceed that once containerd appends its own
// names; /run/podvisor/containerd-<16 hex>/containerd.sock.ttrpc is 64 bytes
// whatever the data directory. The hash is stable, so a restarted containerd
// finds the same state directory and re-adopts the running shims.
type Paths struct {
	Dir        string // DATA_DIR/containerd
	Config     string // DATA_DIR/containerd/config.toml, written at every start
	Root       string // DATA_DIR/containerd/root: content, snapshots, metadata
	Log        string // DATA_DIR/containerd/containerd.log: containerd's own output
	CNIConfDir string // DATA_DIR/containerd/cni: the CNI network config
	HostsDir   string // DATA_DIR/containerd/certs.d: registry hosts.toml files, from DATA_DIR/registries.yaml
	Images     string // DATA_DIR/images: tars imported at every start (air-gap folder)
	State      string // /run/podvisor/containerd-<hash>
	Socket     string // State/containerd.sock: containerd's gRPC API and the CRI
	// KeptExits is State/io.containerd.grpc.v1.cri/containers, the CRI's
	// state directories of its containers, where podvisor's shim keeps a
	// container's exit (package keptexit).
	KeptExits string
}

// stateBase holds the state directories; a variable so that tests that
// are not root could move it.
var stateBase = "/run/podvisor"

// PathsFor returns the paths for the data directory dataDir.
func PathsFor(dataDir string) (Paths, error) {
	if dataDir == "" {
		return Paths{}, fmt.Errorf("containerd: no data directory")
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return Paths{}, err
	}
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join(abs, "containerd")
	state := filepath.Join(stateBase, "containerd-"+hex.EncodeToString(sum[:8]))
	return Paths{
		Dir:        dir,
		Config:     filepath.Join(dir, "config.toml"),
		Root:       filepath.Join(dir, "root"),
		Log:        filepath.Join(dir, "containerd.log"),
		CNIConfDir: filepath.Join(dir, "cni"),
		HostsDir:   filepath.Join(dir, "certs.d"),
		Images:     filepath.Join(abs, "images"),
		State:      state,
		Socket:     filepath.Join(state, "containerd.sock"),
		KeptExits:  filepath.Join(state, "io.containerd.grpc.v1.cri", "containers"),
	}, nil
}

// Endpoint is the CRI endpoint of the socket, as CRI clients take it.
func (p Paths) Endpoint() string { return "unix://" + p.Socket }
