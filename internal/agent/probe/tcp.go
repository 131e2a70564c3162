package probe

import (
	"context"
	"time"
)

// tcpAction succeeds when a connection opens.
type tcpAction struct {
	addr    string
	timeout time.Duration
}

func (a *tcpAction) run(ctx context.Context) outcome {
	d := probeDialer()
	d.Timeout = a.timeout
	conn, err := d.DialContext(ctx, "tcp", a.addr)
	if err != nil {
		// Any dial error, timeouts included, is a failure, as upstream.
		return outcome{result: resultFailure, output: err.Error()}
	}
	_ = conn.Close()
	return outcome{result: resultSuccess}
}
