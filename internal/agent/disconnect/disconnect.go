// Package disconnect ends a served connection's context when its peer goes
// away. net/http stops watching a connection once a handler hijacks it
// (SPDY, WebSocket), so the request context of an exec session would outlive
// the client; with this, it ends when the upgraded connection does.
package disconnect

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
)

// Listener wraps ln; serve it with ConnContext as the http.Server's ConnContext.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

// ConnContext gives each connection accepted by a Listener a context that is
// cancelled once a read from it fails (the peer closed or reset it) or it is
// closed. Other connections keep ctx.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	for {
		if w, ok := c.(*conn); ok {
			ctx, cancel := context.WithCancel(ctx)
			w.setCancel(cancel)
			return ctx
		}
		inner, ok := c.(interface{ NetConn() net.Conn }) // *tls.Conn
		if !ok {
			return ctx
		}
		c = inner.NetConn()
	}
}

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c}, nil
}

type conn struct {
	net.Conn
	mu     sync.Mutex
	gone   bool
	cancel context.CancelFunc
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	// A passed deadline is net/http interrupting its own read, not the peer.
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.hangUp()
	}
	return n, err
}

func (c *conn) Close() error {
	c.hangUp()
	return c.Conn.Close()
}

func (c *conn) hangUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gone = true
	if c.cancel != nil {
		c.cancel()
	}
}

func (c *conn) setCancel(cancel context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancel = cancel
	if c.gone {
		cancel()
	}
}
