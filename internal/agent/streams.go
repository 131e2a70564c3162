package agent

import (
	"context"
	"fmt"
	"net/url"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/internal/agent/agentapi"
	"github.com/podvisor/podvisor/internal/runtime"
)

// runOutputLimit bounds what /run returns, as the kubelet bounds ExecSync's output.
const runOutputLimit = 16 << 20

// streams gives the agent API the runtime's sessions and finds containers
// the way the kubelet does: in what the runtime has running, not in status.
type streams struct {
	runtime.Streamer
	containers runtime.Containers
	exec       runtime.Executor
}

var _ agentapi.Streams = streams{}

// newStreams gives the agent API the runtime set's sessions; a runtime
// without them refuses each session with a clear error.
func newStreams(set runtime.Set) streams {
	s := streams{Streamer: set.Streams, containers: set.Containers, exec: set.Exec}
	if s.Streamer == nil {
		s.Streamer = noStreams{}
	}
	return s
}

// noStreams is the Streamer of a runtime without interactive sessions.
type noStreams struct{}

var errNoStreams = fmt.Errorf("the container runtime has no interactive sessions (exec, attach, port-forward): %w", runtime.ErrInvalid)

func (noStreams) GetExec(context.Context, runtime.ExecRequest) (*url.URL, error) {
	return nil, errNoStreams
}
func (noStreams) GetAttach(context.Context, runtime.AttachRequest) (*url.URL, error) {
	return nil, errNoStreams
}
func (noStreams) GetPortForward(context.Context, runtime.PortForwardRequest) (*url.URL, error) {
	return nil, errNoStreams
}

func (s streams) ContainerID(ctx context.Context, podUID types.UID, container string) (string, error) {
	list, err := s.containers.List(ctx)
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
	code, err := s.exec.Exec(ctx, id, cmd, out, out, 0)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("command %q exited with %d: %s", cmd, code, out.Bytes())
	}
	return out.Bytes(), nil
}
