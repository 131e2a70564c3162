package cri

import (
	"context"
	"fmt"
	"os"
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// sandboxEntry is what this runtime keeps of a sandbox: the config that
// CreateContainer passes with each container, and its IPs, which do not
// change while it lives.
type sandboxEntry struct {
	spec   runtime.SandboxSpec
	config *runtimeapi.PodSandboxConfig
	ips    []string // nil: not read yet
}

// RunSandbox runs the pod's sandbox with the config a kubelet gives; it is
// ready (its network set up) when RunPodSandbox returns.
func (r *Runtime) RunSandbox(ctx context.Context, spec runtime.SandboxSpec) (string, error) {
	cfg, err := sandboxConfig(spec)
	if err != nil {
		return "", err
	}
	if spec.LogDir != "" {
		if err := os.MkdirAll(spec.LogDir, 0o755); err != nil {
			return "", fmt.Errorf("run sandbox of %s/%s: %w", spec.PodNamespace, spec.PodName, err)
		}
	}
	if err := r.gate.enter(ctx, stageSandbox); err != nil {
		return "", classify(err, "run sandbox of %s/%s", spec.PodNamespace, spec.PodName)
	}
	id, err := r.rs.RunPodSandbox(quiet(ctx), cfg, "")
	r.gate.leave()
	if err != nil {
		return "", classify(err, "run sandbox of %s/%s", spec.PodNamespace, spec.PodName)
	}
	r.mu.Lock()
	r.sandboxes[id] = &sandboxEntry{spec: spec, config: cfg}
	r.mu.Unlock()
	r.log.Info("sandbox created", "pod", spec.PodNamespace+"/"+spec.PodName, "id", id, "attempt", spec.Attempt)
	return id, nil
}

// StopSandbox kills the sandbox's containers and releases its network.
// An unknown sandbox is ErrNotFound (containerd 2 says nothing).
func (r *Runtime) StopSandbox(ctx context.Context, id string) error {
	if err := r.sandboxExists(ctx, id); err != nil {
		return err
	}
	if err := r.gate.enter(ctx, stageTeardown); err != nil {
		return classify(err, "stop sandbox %s", id)
	}
	err := r.rs.StopPodSandbox(quiet(ctx), id)
	r.gate.leave()
	if err != nil {
		return classify(err, "stop sandbox %s", id)
	}
	return nil
}

// RemoveSandbox removes the sandbox, its containers and their termination
// message files. An unknown sandbox is ErrNotFound (CRI says nothing).
func (r *Runtime) RemoveSandbox(ctx context.Context, id string) error {
	if err := r.sandboxExists(ctx, id); err != nil {
		return err
	}
	if err := r.gate.enter(ctx, stageTeardown); err != nil {
		return classify(err, "remove sandbox %s", id)
	}
	err := r.rs.RemovePodSandbox(quiet(ctx), id)
	r.gate.leave()
	if err != nil {
		return classify(err, "remove sandbox %s", id)
	}
	r.events.forget(id)
	r.mu.Lock()
	delete(r.sandboxes, id)
	for cid, m := range r.containers {
		if m.sandboxID == id {
			delete(r.containers, cid)
			r.events.forget(cid)
		}
	}
	r.mu.Unlock()
	if err := os.RemoveAll(r.terminationDir(id)); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	return nil
}

func (r *Runtime) SandboxStatus(ctx context.Context, id string) (runtime.SandboxStatus, error) {
	resp, err := r.rs.PodSandboxStatus(quiet(ctx), id, false)
	if err != nil {
		return runtime.SandboxStatus{}, classify(err, "sandbox %s", id)
	}
	st := sandboxStatus(resp.GetStatus(), r.cfg.HostIPs)
	r.rememberSandbox(resp.GetStatus().GetAnnotations(), id, st.IPs)
	return st, nil
}

// ListSandboxes returns the sandboxes of pods (those with a pod UID label).
// Their IPs are read once per sandbox, then known.
func (r *Runtime) ListSandboxes(ctx context.Context) ([]runtime.SandboxStatus, error) {
	list, err := r.rs.ListPodSandbox(quiet(ctx), nil)
	if err != nil {
		return nil, classify(err, "list sandboxes")
	}
	r.forgetSandboxesBut(list)
	out := make([]runtime.SandboxStatus, 0, len(list))
	for _, s := range list {
		if s.GetLabels()[labelPodUID] == "" {
			continue
		}
		r.mu.Lock()
		e := r.sandboxes[s.Id]
		var ips []string
		if e != nil {
			ips = e.ips
		}
		r.mu.Unlock()
		if e == nil || ips == nil {
			st, err := r.SandboxStatus(ctx, s.Id)
			if runtime.IsNotFound(err) {
				continue // removed meanwhile
			}
			if err != nil {
				return nil, err
			}
			out = append(out, st)
			continue
		}
		st := sandboxStatus(&runtimeapi.PodSandboxStatus{
			Id: s.Id, Metadata: s.Metadata, State: s.State, CreatedAt: s.CreatedAt, Labels: s.Labels,
		}, r.cfg.HostIPs)
		st.HostNetwork = e.spec.HostNetwork
		st.IPs = slices.Clone(ips)
		out = append(out, st)
	}
	return out, nil
}

// sandbox returns what CreateContainer needs of sandbox id: known since
// RunSandbox, or rebuilt from the spec in its annotation.
func (r *Runtime) sandbox(ctx context.Context, id string) (*sandboxEntry, error) {
	r.mu.Lock()
	e := r.sandboxes[id]
	r.mu.Unlock()
	if e != nil {
		return e, nil
	}
	if id == "" {
		return nil, fmt.Errorf("no sandbox ID: %w", runtime.ErrInvalid)
	}
	if _, err := r.SandboxStatus(ctx, id); err != nil {
		return nil, err
	}
	r.mu.Lock()
	e = r.sandboxes[id]
	r.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("sandbox %s was not made by podvisor (no %s annotation): %w", id, annotationSandboxSpec, runtime.ErrInvalid)
	}
	return e, nil
}

// forgetSandboxesBut drops what is kept of sandboxes not in list (removed
// behind this runtime's back); one run since the list began is read again
// from its annotation when needed.
func (r *Runtime) forgetSandboxesBut(list []*runtimeapi.PodSandbox) {
	listed := make(map[string]bool, len(list))
	for _, s := range list {
		listed[s.Id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.sandboxes {
		if !listed[id] {
			delete(r.sandboxes, id)
		}
	}
}

// sandboxExists is nil for a sandbox this runtime knows or the runtime has.
func (r *Runtime) sandboxExists(ctx context.Context, id string) error {
	r.mu.Lock()
	_, ok := r.sandboxes[id]
	r.mu.Unlock()
	if ok {
		return nil
	}
	_, err := r.SandboxStatus(ctx, id)
	return err
}

// rememberSandbox records sandbox id from its annotations and IPs.
func (r *Runtime) rememberSandbox(annotations map[string]string, id string, ips []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.sandboxes[id]; e != nil {
		if e.ips == nil {
			e.ips = slices.Clone(ips)
			if e.ips == nil {
				e.ips = []string{}
			}
		}
		return
	}
	spec, ok := specOf(annotations)
	if !ok {
		return
	}
	cfg, err := sandboxConfig(spec)
	if err != nil {
		return
	}
	e := &sandboxEntry{spec: spec, config: cfg, ips: slices.Clone(ips)}
	if e.ips == nil {
		e.ips = []string{}
	}
	r.sandboxes[id] = e
}
