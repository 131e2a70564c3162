package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPickReturnsABindablePort(t *testing.T) {
	port, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	if port <= 0 || port > 65535 {
		t.Fatalf("port %d out of range", port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("port %d not free: %v", port, err)
	}
	l.Close()
}
