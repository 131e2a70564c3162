package cri

import (
	"context"
	"fmt"
	"net/url"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// GetExec asks the runtime for the URL of an exec session on its own
// streaming server, as the kubelet does; the agent proxies to it.
func (r *Runtime) GetExec(ctx context.Context, req runtime.ExecRequest) (*url.URL, error) {
	if err := r.checkRunning(ctx, req.ContainerID); err != nil {
		return nil, err
	}
	resp, err := r.rs.Exec(quiet(ctx), &runtimeapi.ExecRequest{
		ContainerId: req.ContainerID, Cmd: req.Cmd,
		Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Tty: req.TTY,
	})
	if err != nil {
		return nil, classify(err, "exec in container %s", req.ContainerID)
	}
	return parseStreamURL(resp.GetUrl())
}

// GetAttach asks the runtime for the URL of a session attached to the
// container's main process.
func (r *Runtime) GetAttach(ctx context.Context, req runtime.AttachRequest) (*url.URL, error) {
	if err := r.checkRunning(ctx, req.ContainerID); err != nil {
		return nil, err
	}
	resp, err := r.rs.Attach(quiet(ctx), &runtimeapi.AttachRequest{
		ContainerId: req.ContainerID,
		Stdin:       req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Tty: req.TTY,
	})
	if err != nil {
		return nil, classify(err, "attach to container %s", req.ContainerID)
	}
	return parseStreamURL(resp.GetUrl())
}

// GetPortForward asks the runtime for the URL of a session forwarding to
// ports in the network namespace of the pod's ready sandbox.
func (r *Runtime) GetPortForward(ctx context.Context, req runtime.PortForwardRequest) (*url.URL, error) {
	list, err := r.rs.ListPodSandbox(quiet(ctx), &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{labelPodUID: req.PodUID},
	})
	if err != nil {
		return nil, classify(err, "port-forward to pod %s", req.PodUID)
	}
	var newest *runtimeapi.PodSandbox
	for _, s := range list {
		if newest == nil || s.GetCreatedAt() > newest.GetCreatedAt() {
			newest = s
		}
	}
	if newest == nil {
		return nil, fmt.Errorf("port-forward to pod %s: it has no ready sandbox: %w", req.PodUID, runtime.ErrNotFound)
	}
	resp, err := r.rs.PortForward(quiet(ctx), &runtimeapi.PortForwardRequest{PodSandboxId: newest.Id, Port: req.Ports})
	if err != nil {
		return nil, classify(err, "port-forward to pod %s", req.PodUID)
	}
	return parseStreamURL(resp.GetUrl())
}

// checkRunning refuses a session with a container that does not run, before
// the client upgrades its connection.
func (r *Runtime) checkRunning(ctx context.Context, id string) error {
	st, err := r.Status(ctx, id)
	if err != nil {
		return err
	}
	if st.State != runtime.StateRunning {
		return fmt.Errorf("container %s is %s: %w", id, st.State, runtime.ErrConflict)
	}
	return nil
}

func parseStreamURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("the runtime's streaming URL %q: %w", s, err)
	}
	return u, nil
}
