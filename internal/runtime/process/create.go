package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Create makes the instance directory: it is built under a temporary name
// and renamed into place, so List never sees half an instance.
func (r *Runtime) Create(_ context.Context, spec runtime.ContainerSpec) (string, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return "", fmt.Errorf("container %s: no command: %w", spec.Name, runtime.ErrInvalid)
	}
	if spec.LogPath == "" {
		return "", fmt.Errorf("container %s: no log path: %w", spec.Name, runtime.ErrInvalid)
	}
	for _, m := range spec.Mounts {
		if m.Image != "" {
			return "", fmt.Errorf("container %s: an image volume at %s: the process runtime has no images: %w", spec.Name, m.ContainerPath, runtime.ErrInvalid)
		}
	}
	id := newID()
	final := filepath.Join(r.root, id)
	tmp := filepath.Join(r.root, ".create-"+id)
	cfg := instanceConfig{ID: id, CreatedAt: r.clock.Now(), Spec: spec, NoCgroups: r.noCg}
	if spec.TerminationMessagePath != "" {
		cfg.TerminationMessageFile = filepath.Join(final, terminationFile)
	}
	if err := buildInstance(instanceDir(tmp), cfg); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("create container %s: %w", spec.Name, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("create container %s: %w", spec.Name, err)
	}
	if err := syncDir(r.root); err != nil {
		return "", fmt.Errorf("create container %s: %w", spec.Name, err)
	}
	r.log.Info("container created", "pod", spec.PodNamespace+"/"+spec.PodName, "container", spec.Name, "id", id)
	return id, nil
}

func buildInstance(d instanceDir, cfg instanceConfig) error {
	if err := os.Mkdir(string(d), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(d.path(workDir), 0o755); err != nil {
		return err
	}
	if cfg.TerminationMessageFile != "" {
		// World-writable as upstream's: the process may run as another user.
		f, err := os.OpenFile(d.path(terminationFile), os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Chmod(0o666)
		f.Close()
	}
	if err := writeJSON(d.path(configFile), cfg); err != nil {
		return err
	}
	return d.writeState(instanceState{State: runtime.StateCreated.String()})
}
