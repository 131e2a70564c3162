// Package freeport finds a TCP port on loopback that nothing listens on, for
// components podvisor runs on ports of its own choosing (etcd, containerd's
// streaming server) and for tests.
package freeport

import "net"

// Pick returns a port the kernel just handed out on 127.0.0.1 and that was
// released again; another process may take it before the caller binds it.
func Pick() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
