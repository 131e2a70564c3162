package volume

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/podvisor/podvisor/internal/agent/volume/claim"
)

// NFS PVs are mounted by the host's NFS client, as the kubelet's nfs
// plugin: `mount -t nfs server:export` (mount(8) runs the mount.nfs helper)
// at <pod dir>/volumes/kubernetes.io~nfs/<pv>, which the containers
// bind-mount; TearDown unmounts it with the pod's other mounts. A node
// without the client says so rather than letting mount(8) fail obscurely.

const nfsPlugin = "kubernetes.io~nfs"

// nfsHelperDirs are where distributions install mount.nfs (nfs-common,
// nfs-utils), besides PATH.
var nfsHelperDirs = []string{"/sbin", "/usr/sbin"}

// nfsClient finds the mount.nfs helper (a variable for the tests).
var nfsClient = func() error {
	for _, dir := range nfsHelperDirs {
		if fi, err := os.Stat(filepath.Join(dir, "mount.nfs")); err == nil && !fi.IsDir() {
			return nil
		}
	}
	if _, err := exec.LookPath("mount.nfs"); err == nil {
		return nil
	}
	return fmt.Errorf("the NFS client is not installed on this node: mount.nfs not found in %s or PATH (Debian, Ubuntu: apt-get install nfs-common; Fedora, RHEL: dnf install nfs-utils)", strings.Join(nfsHelperDirs, ", "))
}

// runMount runs mount(8) with args (a variable for the tests: they never
// mount a remote server).
var runMount = func(ctx context.Context, args []string) ([]byte, error) {
	return exec.CommandContext(ctx, "mount", args...).CombinedOutput()
}

// setupNFS mounts the nfs PV of m at the pod's volume directory, once: a
// directory that is already a mount point is left as it is.
func (vm *Manager) setupNFS(ctx context.Context, podDir string, m claim.Mount) (string, error) {
	target := filepath.Join(podDir, "volumes", nfsPlugin, m.PV)
	if slices.Contains(mountPoints(), target) {
		return target, nil
	}
	fail := func(err error) error {
		return &claim.Message{Msg: fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", m.PV, err)}
	}
	if err := nfsClient(); err != nil {
		return "", fail(err)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return "", fail(err)
	}
	args := claim.NFSMountArgs(m, target)
	// Bounded as a CSI call: mount.nfs retries an unreachable server for
	// minutes, holding the pod's volumes.
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	if out, err := runMount(ctx, args); err != nil {
		_ = os.Remove(target) // empty: nothing was mounted
		return "", fail(fmt.Errorf("mount failed: %v\nMounting command: mount\nMounting arguments: %s\nOutput: %s", err, strings.Join(args, " "), out))
	}
	vm.cfg.Log.Info("NFS volume mounted", "pv", m.PV, "source", m.NFSSource, "dir", podDir)
	return target, nil
}
