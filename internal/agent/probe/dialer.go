package probe

import (
	"net"
	"syscall"
)

// probeDialer sets SO_LINGER on every probe connection, as upstream does, so
// thousands of short-lived probe connections do not pile up half-closed.
func probeDialer() *net.Dialer {
	return &net.Dialer{
		Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) {
				_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
			})
		},
	}
}
