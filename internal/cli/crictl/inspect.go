package crictl

// inspect, inspectp, inspecti, info and version: the runtime's status as JSON.

import (
	"context"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func (c *cli) inspect(ctx context.Context, args []string) error {
	ids, err := c.ids("inspect", args, nil)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		r, err := c.rs.ContainerStatus(ctx, id, true)
		if err != nil {
			return fmt.Errorf("container %s: %w", id, err)
		}
		if err := c.statusJSON(r.GetStatus(), r.GetInfo()); err != nil {
			return err
		}
	}
	return nil
}

func (c *cli) inspectp(ctx context.Context, args []string) error {
	ids, err := c.ids("inspectp", args, nil)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		r, err := c.rs.PodSandboxStatus(ctx, id, true)
		if err != nil {
			return fmt.Errorf("pod sandbox %s: %w", id, err)
		}
		if err := c.statusJSON(r.GetStatus(), r.GetInfo()); err != nil {
			return err
		}
	}
	return nil
}

func (c *cli) inspecti(ctx context.Context, args []string) error {
	ids, err := c.ids("inspecti", args, nil)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		r, err := c.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: id}, true)
		if err != nil {
			return fmt.Errorf("image %s: %w", id, err)
		}
		if r.GetImage() == nil {
			return fmt.Errorf("no image %s", id)
		}
		if err := c.statusJSON(r.GetImage(), r.GetInfo()); err != nil {
			return err
		}
	}
	return nil
}

func (c *cli) info(ctx context.Context, args []string) error {
	if _, err := parse(c.flags("info"), args); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	r, err := c.rs.Status(ctx, true)
	if err != nil {
		return err
	}
	return c.statusJSON(r.GetStatus(), r.GetInfo())
}

func (c *cli) version(ctx context.Context, args []string) error {
	if _, err := parse(c.flags("version"), args); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	v, err := c.rs.Version(ctx, "v1")
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "Version:  %s\nRuntimeName:  %s\nRuntimeVersion:  %s\nRuntimeApiVersion:  %s\n",
		v.GetVersion(), v.GetRuntimeName(), v.GetRuntimeVersion(), v.GetRuntimeApiVersion())
	return nil
}

// statusJSON prints {"status": …, "info": {…}} as crictl's inspect does:
// the runtime's verbose info values are JSON documents themselves.
func (c *cli) statusJSON(status proto.Message, info map[string]string) error {
	b, err := protojson.Marshal(status)
	if err != nil {
		return err
	}
	out := map[string]any{"status": json.RawMessage(b)}
	if len(info) > 0 {
		m := map[string]any{}
		for k, v := range info {
			var parsed any
			if json.Unmarshal([]byte(v), &parsed) == nil {
				m[k] = parsed
			} else {
				m[k] = v
			}
		}
		out["info"] = m
	}
	return c.writeJSON(out)
}

func (c *cli) json(m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	return c.writeJSON(json.RawMessage(b))
}

func (c *cli) writeJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.out, string(b))
	return err
}
