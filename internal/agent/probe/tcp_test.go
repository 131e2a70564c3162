package probe

import (
	"context"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func runTCP(t *testing.T, s *v1.TCPSocketAction, timeout time.Duration) outcome {
	t.Helper()
	p := &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: s}}
	tm := timingOf(liveness, p)
	if timeout > 0 {
		tm.timeout = timeout
	}
	c := &v1.Container{Name: "app", Ports: []v1.ContainerPort{{Name: "db"}}}
	if s.Port.Type == intstr.Int {
		c.Ports[0].ContainerPort = s.Port.IntVal
	}
	return runWithRetries(context.Background(), newAction(testEnv(), tm, p, c, "id", "127.0.0.1"))
}

func TestTCPSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := int32(l.Addr().(*net.TCPAddr).Port)
	if o := runTCP(t, &v1.TCPSocketAction{Port: intstr.FromInt32(port)}, 0); o.result != resultSuccess {
		t.Errorf("open port: %+v", o)
	}
	if o := runTCP(t, &v1.TCPSocketAction{Host: "localhost", Port: intstr.FromInt32(port)}, 0); o.result != resultSuccess {
		t.Errorf("explicit host: %+v", o)
	}

	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	cport := int32(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()
	if o := runTCP(t, &v1.TCPSocketAction{Port: intstr.FromInt32(cport)}, 0); o.result != resultFailure || !strings.Contains(o.output, "connection refused") {
		t.Errorf("closed port: %+v", o)
	}
	if o := runTCP(t, &v1.TCPSocketAction{Host: "no-such-host.invalid", Port: intstr.FromInt32(port)}, 0); o.result != resultFailure || !strings.Contains(o.output, "no-such-host.invalid") {
		t.Errorf("unresolvable host: %+v", o)
	}
	if o := runTCP(t, &v1.TCPSocketAction{Port: intstr.FromString("nope")}, 0); o.result != resultUnknown || o.err == nil {
		t.Errorf("missing named port: %+v", o)
	}
}

// §6: a timeout is a failure. A listener whose accept queue is full drops
// new SYNs, so the probe's dial hangs until its timeout.
func TestTCPTimeoutIsFailure(t *testing.T) {
	port := fullListener(t)
	begin := time.Now()
	o := runTCP(t, &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}, 300*time.Millisecond)
	if o.result != resultFailure || !strings.Contains(o.output, "timeout") {
		t.Errorf("%+v", o)
	}
	if d := time.Since(begin); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// fullListener listens on 127.0.0.1 with a backlog of 0, never accepts, and
// fills the accept queue.
func fullListener(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	for range 4 {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 100*time.Millisecond)
		if err != nil {
			break // full
		}
		t.Cleanup(func() { c.Close() })
	}
	return port
}
