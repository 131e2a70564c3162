package runtime

import (
	"context"
	"net/url"
)

// Streamer hands out the URLs of interactive sessions, as CRI's Exec, Attach
// and PortForward RPCs do: the agent API finds the pod and container, asks
// for a URL and proxies the client's upgraded connection (SPDY, or WebSocket
// translated to SPDY) to it. A URL serves one connection and expires after a
// minute if unused. Each method checks what it can before the client
// upgrades (the container exists and runs), so that those errors reach the
// client as HTTP errors rather than in the stream.
type Streamer interface {
	GetExec(ctx context.Context, req ExecRequest) (*url.URL, error)
	GetAttach(ctx context.Context, req AttachRequest) (*url.URL, error)
	GetPortForward(ctx context.Context, req PortForwardRequest) (*url.URL, error)
}

// ExecRequest mirrors CRI's ExecRequest: run Cmd in a running container with
// the chosen streams. TTY runs it on a pseudo-terminal (stdout and stderr are
// then one stream, so Stderr must be false), resizable by the client.
type ExecRequest struct {
	ContainerID string
	Cmd         []string
	Stdin       bool
	Stdout      bool
	Stderr      bool
	TTY         bool
}

// AttachRequest mirrors CRI's AttachRequest: connect to the streams of a
// running container's main process.
type AttachRequest struct {
	ContainerID string
	Stdin       bool
	Stdout      bool
	Stderr      bool
	TTY         bool
}

// PortForwardRequest mirrors CRI's PortForwardRequest, with the pod named by
// its UID (a runtime with sandboxes finds the pod's). Ports may be empty: a
// SPDY client names each port when it opens its streams.
type PortForwardRequest struct {
	PodUID string
	Ports  []int32
}
