package podworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/agent/containergc"
	"github.com/podvisor/podvisor/internal/runtime"
)

// CollectContainers is one round of container garbage collection: it lists
// what the runtime has, asks containergc which dead instances and sandboxes
// to remove, and removes them, an instance with its log (rotated files
// included). The round goes on past a removal that fails and returns the
// failures.
func (m *Manager) CollectContainers(ctx context.Context, p containergc.Policy) error {
	sandboxes, err := m.cfg.Runtime.Sandboxes.ListSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("listing sandboxes: %w", err)
	}
	list, err := m.cfg.Runtime.Containers.List(ctx)
	if err != nil {
		return fmt.Errorf("listing containers: %w", err)
	}
	// The pods are read after the runtime: a worker made since then has
	// nothing in the lists, and one that finished since then removed its
	// instances itself.
	plan := containergc.Plan(list, sandboxes, m.podsHeld(), p, m.cfg.Clock.Now())
	var errs []error
	for _, r := range plan.Containers {
		if err := m.removeDead(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range plan.Sandboxes {
		// Stopped first, as upstream: one that died still holds its network.
		err := m.cfg.Runtime.Sandboxes.StopSandbox(ctx, id)
		if err == nil {
			err = m.cfg.Runtime.Sandboxes.RemoveSandbox(ctx, id)
		}
		if err != nil && !runtime.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing sandbox %s: %w", id, err))
			continue
		}
		m.cfg.Log.Info("garbage-collected pod sandbox", "id", id)
	}
	return errors.Join(errs...)
}

// podsHeld are the UIDs of the pods the node has: those with a worker and
// those whose re-adopted instances no worker claimed yet.
func (m *Manager) podsHeld() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]bool, len(m.workers)+len(m.orphans))
	for uid := range m.workers {
		out[string(uid)] = true
	}
	for uid := range m.orphans {
		out[string(uid)] = true
	}
	return out
}

func (m *Manager) removeDead(ctx context.Context, r containergc.Removal) error {
	pod := r.PodNamespace + "/" + r.PodName
	if r.Stop {
		if err := m.cfg.Runtime.Containers.Stop(ctx, r.ID, 0); err != nil && !runtime.IsNotFound(err) {
			return fmt.Errorf("stopping container %s of %s in unknown state: %w", r.ID, pod, err)
		}
	}
	if err := m.cfg.Runtime.Containers.Remove(ctx, r.ID); err != nil && !runtime.IsNotFound(err) {
		return fmt.Errorf("removing container %s of %s: %w", r.ID, pod, err)
	}
	m.removeLog(r.LogPath)
	if w := m.worker(types.UID(r.PodUID)); w != nil {
		w.forget(r.Name, r.ID)
	}
	m.cfg.Log.Info("garbage-collected dead container", "pod", pod, "container", r.Name, "id", r.ID, "attempt", r.Attempt)
	return nil
}

// removeLog removes a removed instance's log and its rotated files
// (<log>.<time>, compressed or not), as the kubelet does; only under the
// node's pod directories, never a path another client of the runtime gave.
func (m *Manager) removeLog(path string) {
	if path == "" {
		return
	}
	rel, err := filepath.Rel(m.cfg.PodsDir, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return
	}
	rotated, _ := filepath.Glob(path + ".*")
	for _, f := range append(rotated, path) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.cfg.Log.Warn("removing the log of a garbage-collected container", "path", f, "err", err)
		}
	}
}

// forget drops the record of a removed instance. The two newest records of
// a container stay whatever the runtime has: the status is computed from
// them (state and lastState), and keeping them keeps a terminated pod's
// published status as it was.
func (w *worker) forget(name, id string) {
	if w.m.cfg.Prober != nil {
		w.m.cfg.Prober.RemoveContainer(id)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	list := w.instancesOf(name)
	for i := 0; i < len(list)-2; i++ {
		if list[i].ID == id {
			w.containerLocked(name).instances = append(list[:i:i], list[i+1:]...)
			delete(w.instFacts, id)
			return
		}
	}
}
