package crictl

// logs, stop, rm and rmp: reading and acting on containers and sandboxes.

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/agent/logs"
)

func (c *cli) logs(ctx context.Context, args []string) error {
	fs := c.flags("logs")
	follow := fs.Bool("f", false, "follow the log")
	fs.BoolVar(follow, "follow", false, "follow the log")
	tail := fs.Int64("tail", -1, "the last N lines only")
	stamps := fs.Bool("t", false, "show timestamps")
	fs.BoolVar(stamps, "timestamps", false, "show timestamps")
	ids, err := c.ids("logs", args, fs)
	if err != nil {
		return err
	}
	if len(ids) != 1 {
		return fmt.Errorf("logs: give one container ID")
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	r, err := c.rs.ContainerStatus(ctx, ids[0], false)
	if err != nil {
		return fmt.Errorf("container %s: %w", ids[0], err)
	}
	path := r.GetStatus().GetLogPath()
	if path == "" {
		return fmt.Errorf("container %s has no log path", ids[0])
	}
	id := r.GetStatus().GetId()
	opts := logs.Options{Follow: *follow, Timestamps: *stamps, Exited: func() bool {
		s, err := c.rs.ContainerStatus(ctx, id, false)
		return err != nil || s.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
	}}
	if *tail >= 0 {
		opts.TailLines = tail
	}
	return logs.ReadLogs(ctx, path, opts, c.out)
}

func (c *cli) stop(ctx context.Context, args []string) error {
	fs := c.flags("stop")
	grace := fs.Int64("t", 0, "seconds to wait before the container is killed")
	fs.Int64Var(grace, "timeout", 0, "seconds to wait before the container is killed")
	ids, err := c.ids("stop", args, fs)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		if err := c.rs.StopContainer(ctx, id, *grace); err != nil {
			return fmt.Errorf("stopping container %s: %w", id, err)
		}
		fmt.Fprintln(c.out, id)
	}
	return nil
}

func (c *cli) rm(ctx context.Context, args []string) error {
	fs := c.flags("rm")
	force := fs.Bool("f", false, "stop a running container first")
	fs.BoolVar(force, "force", false, "stop a running container first")
	ids, err := c.ids("rm", args, fs)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		s, err := c.rs.ContainerStatus(ctx, id, false)
		if err != nil {
			return fmt.Errorf("container %s: %w", id, err)
		}
		if s.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			if !*force {
				return fmt.Errorf("container %s is running: stop it first, or rm -f", id)
			}
			if err := c.rs.StopContainer(ctx, id, 0); err != nil {
				return fmt.Errorf("stopping container %s: %w", id, err)
			}
		}
		if err := c.rs.RemoveContainer(ctx, id); err != nil {
			return fmt.Errorf("removing container %s: %w", id, err)
		}
		fmt.Fprintln(c.out, id)
	}
	return nil
}

func (c *cli) rmp(ctx context.Context, args []string) error {
	fs := c.flags("rmp")
	force := fs.Bool("f", false, "stop a ready pod sandbox first")
	fs.BoolVar(force, "force", false, "stop a ready pod sandbox first")
	ids, err := c.ids("rmp", args, fs)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		s, err := c.rs.PodSandboxStatus(ctx, id, false)
		if err != nil {
			return fmt.Errorf("pod sandbox %s: %w", id, err)
		}
		if s.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			if !*force {
				return fmt.Errorf("pod sandbox %s is ready: stop it first, or rmp -f", id)
			}
			if err := c.rs.StopPodSandbox(ctx, id); err != nil {
				return fmt.Errorf("stopping pod sandbox %s: %w", id, err)
			}
			fmt.Fprintf(c.out, "Stopped sandbox %s\n", id)
		}
		if err := c.rs.RemovePodSandbox(ctx, id); err != nil {
			return fmt.Errorf("removing pod sandbox %s: %w", id, err)
		}
		fmt.Fprintf(c.out, "Removed sandbox %s\n", id)
	}
	return nil
}
