package agent

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/agentapi"
	"github.com/podvisor/podvisor/internal/runtime"
)

// runOutputLimit bounds what /run returns, as the kubelet bounds ExecSync's output.
const runOutputLimit = 16 << 20

// streams gives the agent API the runtime's sessions and finds containers
// the way the kubelet does: in what the runtime has running, not in status.
type streams struct {
	runtime.Streamer
	runtime runtime.Runtime
}

var _ agentapi.Streams = streams{}

func (s streams) ContainerID(ctx context.Context, podUID types.UID, container string) (string, error) {
	list, err := s.runtime.List(ctx)
	if err != nil {
		return "", err
	}
	var found *runtime.Status
	for i, st := range list {
		if st.PodUID == string(podUID) && st.Name == container && st.State == runtime.StateRunning &&
			(found == nil || st.Attempt > found.Attempt) {
			found = &list[i]
		}
	}
	if found == nil {
		return "", nil
	}
	return found.ID, nil
}

func (s streams) Run(ctx context.Context, id string, cmd []string) ([]byte, error) {
	out := &limitedBuffer{max: runOutputLimit}
	code, err := s.runtime.Exec(ctx, id, cmd, out, out, 0)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("command %q exited with %d: %s", cmd, code, out.Bytes())
	}
	return out.Bytes(), nil
}
