package probe

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/httpget"
)

// result of one probe run, as upstream's pkg/probe.
type result int

const (
	resultUnknown result = iota // could not run: no action (§6)
	resultSuccess
	resultWarning // success, with an event (HTTP redirect to another host)
	resultFailure
)

// outcome of one run. err != nil: the probe could not run (Unknown), and err
// says why.
type outcome struct {
	result result
	output string
	err    error
}

// action is one prepared mechanism. run honours ctx and the probe's timeout.
type action interface {
	run(ctx context.Context) outcome
}

// env is what building an action needs from the manager.
type env struct {
	exec      ExecFunc
	http      *httpProber
	userAgent string
}

// newAction prepares the mechanism of p for one container instance. A probe
// that cannot work as written (no or several mechanisms, a missing named port)
// becomes an action that is Unknown with a clear error at every run, as
// upstream reports it every period.
func newAction(e env, t timing, p *v1.Probe, c *v1.Container, containerID, podIP string) action {
	var set []string
	if p.Exec != nil {
		set = append(set, "exec")
	}
	if p.HTTPGet != nil {
		set = append(set, "httpGet")
	}
	if p.TCPSocket != nil {
		set = append(set, "tcpSocket")
	}
	if p.GRPC != nil {
		set = append(set, "grpc")
	}
	if len(set) != 1 {
		// Validation rejects these; an older or buggy client may still send them.
		return invalid{fmt.Errorf("invalid probe: exactly one of exec, httpGet, tcpSocket or grpc must be set, found %d%s",
			len(set), listed(set))}
	}
	switch {
	case p.Exec != nil:
		cmd, err := expandStatic(p.Exec.Command, c.Env)
		if err != nil {
			return invalid{err}
		}
		return &execAction{exec: e.exec, containerID: containerID, cmd: cmd, timeout: t.timeout}
	case p.HTTPGet != nil:
		req, err := httpget.NewRequest(context.Background(), p.HTTPGet, c, podIP, e.userAgent)
		if err != nil {
			return invalid{err}
		}
		return &httpAction{prober: e.http, req: req, timeout: t.timeout}
	case p.TCPSocket != nil:
		port, err := httpget.ResolvePort(p.TCPSocket.Port, c)
		if err != nil {
			return invalid{err}
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = podIP
		}
		return &tcpAction{addr: net.JoinHostPort(host, strconv.Itoa(port)), timeout: t.timeout}
	default:
		service := ""
		if p.GRPC.Service != nil {
			service = *p.GRPC.Service
		}
		// gRPC probes have no host field: always the pod IP, as upstream.
		return &grpcAction{addr: net.JoinHostPort(podIP, strconv.Itoa(int(p.GRPC.Port))), service: service, timeout: t.timeout, userAgent: e.userAgent}
	}
}

func listed(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, ", ") + ")"
}

// invalid is a probe that cannot run as written.
type invalid struct{ err error }

func (a invalid) run(context.Context) outcome { return outcome{result: resultUnknown, err: a.err} }

// maxRetries: a probe that could not run is retried at once, as upstream.
const maxRetries = 3

func runWithRetries(ctx context.Context, a action) outcome {
	var o outcome
	for range maxRetries {
		o = a.run(ctx)
		if o.err == nil {
			return o
		}
		if _, ok := a.(invalid); ok || ctx.Err() != nil {
			return o
		}
	}
	return o
}
