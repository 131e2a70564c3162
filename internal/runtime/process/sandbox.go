package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// A process-runtime sandbox is the host: no namespace of its own, the
// node's IPs. It is a record (Root/sandboxes/<id>.json), so that the pod's
// sandbox and its attempt survive an agent restart as a CRI runtime's do.
const sandboxesDir = "sandboxes"

type sandboxRecord struct {
	ID        string              `json:"id"`
	CreatedAt time.Time           `json:"createdAt"`
	Spec      runtime.SandboxSpec `json:"spec"`
	Stopped   bool                `json:"stopped,omitempty"`
}

func (r *Runtime) sandboxPath(id string) (string, error) {
	if !validID(id) {
		return "", fmt.Errorf("sandbox %q: %w", id, runtime.ErrNotFound)
	}
	return filepath.Join(r.root, sandboxesDir, id+".json"), nil
}

func (r *Runtime) readSandbox(id string) (sandboxRecord, error) {
	var rec sandboxRecord
	p, err := r.sandboxPath(id)
	if err != nil {
		return rec, err
	}
	if err := readJSON(p, &rec); errors.Is(err, os.ErrNotExist) {
		return rec, fmt.Errorf("sandbox %s: %w", id, runtime.ErrNotFound)
	} else if err != nil {
		return rec, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return rec, nil
}

// RunSandbox records the sandbox; a pod network of its own is refused, as
// the process runtime has none (Features.PodNetwork).
func (r *Runtime) RunSandbox(_ context.Context, spec runtime.SandboxSpec) (string, error) {
	if spec.PodUID == "" {
		return "", fmt.Errorf("sandbox of %s/%s: no pod UID: %w", spec.PodNamespace, spec.PodName, runtime.ErrInvalid)
	}
	if err := os.MkdirAll(filepath.Join(r.root, sandboxesDir), 0o700); err != nil {
		return "", fmt.Errorf("run sandbox: %w", err)
	}
	id := newID()
	p, _ := r.sandboxPath(id)
	if err := writeJSON(p, sandboxRecord{ID: id, CreatedAt: r.clock.Now(), Spec: spec}); err != nil {
		return "", fmt.Errorf("run sandbox: %w", err)
	}
	r.log.Info("sandbox created", "pod", spec.PodNamespace+"/"+spec.PodName, "id", id, "attempt", spec.Attempt)
	return id, nil
}

// StopSandbox kills what still runs in the sandbox and marks it NotReady.
func (r *Runtime) StopSandbox(ctx context.Context, id string) error {
	rec, err := r.readSandbox(id)
	if err != nil {
		return err
	}
	if err := r.forContainersIn(ctx, id, func(c runtime.Status) error { return r.Stop(ctx, c.ID, 0) }); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	if rec.Stopped {
		return nil
	}
	rec.Stopped = true
	p, _ := r.sandboxPath(id)
	if err := writeJSON(p, rec); err != nil {
		return fmt.Errorf("stop sandbox %s: %w", id, err)
	}
	return nil
}

// RemoveSandbox removes the sandbox's containers, then the sandbox.
func (r *Runtime) RemoveSandbox(ctx context.Context, id string) error {
	if _, err := r.readSandbox(id); err != nil {
		return err
	}
	if err := r.forContainersIn(ctx, id, func(c runtime.Status) error { return r.Remove(ctx, c.ID) }); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	p, _ := r.sandboxPath(id)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	return syncDir(filepath.Dir(p))
}

func (r *Runtime) forContainersIn(ctx context.Context, sandbox string, f func(runtime.Status) error) error {
	ids, err := r.ids()
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	for _, id := range ids {
		if sb, ok := r.sandboxOfContainer(id); !ok || sb != sandbox {
			continue
		}
		c, err := r.Status(ctx, id)
		if runtime.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		if err := f(c); err != nil && !runtime.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// sandboxOfContainer is the sandbox container id was created in; ok is
// false when its config cannot be read (removed meanwhile).
func (r *Runtime) sandboxOfContainer(id string) (string, bool) {
	r.mu.Lock()
	sb, ok := r.sandboxOf[id]
	r.mu.Unlock()
	if ok {
		return sb, true
	}
	d, err := r.dir(id)
	if err != nil {
		return "", false
	}
	c, err := d.readConfig()
	if err != nil {
		return "", false
	}
	r.mu.Lock()
	r.sandboxOf[id] = c.Spec.SandboxID
	r.mu.Unlock()
	return c.Spec.SandboxID, true
}

func (r *Runtime) SandboxStatus(_ context.Context, id string) (runtime.SandboxStatus, error) {
	rec, err := r.readSandbox(id)
	if err != nil {
		return runtime.SandboxStatus{}, err
	}
	return r.sandboxStatus(rec), nil
}

func (r *Runtime) sandboxStatus(rec sandboxRecord) runtime.SandboxStatus {
	st := runtime.SandboxStatus{
		ID: rec.ID, PodUID: rec.Spec.PodUID, PodNamespace: rec.Spec.PodNamespace, PodName: rec.Spec.PodName,
		Attempt: rec.Spec.Attempt, State: runtime.SandboxReady, CreatedAt: rec.CreatedAt,
		IPs: r.hostIPs, HostNetwork: true, Labels: rec.Spec.Labels,
	}
	if rec.Stopped {
		st.State = runtime.SandboxNotReady
	}
	return st
}

func (r *Runtime) ListSandboxes(context.Context) ([]runtime.SandboxStatus, error) {
	entries, err := os.ReadDir(filepath.Join(r.root, sandboxesDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []runtime.SandboxStatus
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id) {
			continue
		}
		rec, err := r.readSandbox(id)
		if err != nil {
			if !runtime.IsNotFound(err) {
				r.log.Warn("unreadable sandbox record", "id", id, "err", err)
			}
			continue
		}
		out = append(out, r.sandboxStatus(rec))
	}
	return out, nil
}
