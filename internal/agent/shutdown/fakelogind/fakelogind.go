// Package fakelogind is a private D-Bus daemon with a stand-in for
// systemd-logind's Manager (Inhibit, InhibitDelayMaxUSec, PrepareForShutdown),
// so that graceful node shutdown can be tested on any machine, as the
// upstream node tests fake PrepareForShutdown. Tests only.
package fakelogind

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

const (
	service   = "org.freedesktop.login1"
	path      = dbus.ObjectPath("/org/freedesktop/login1")
	iface     = "org.freedesktop.login1.Manager"
	busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`
)

// Bus is a running dbus-daemon on a socket in a directory of its own.
type Bus struct {
	Address string
	cmd     *exec.Cmd
}

// StartBus runs `dbus-daemon --nofork --print-address` with a configuration
// written into dir (Debian's dbus package provides it).
func StartBus(dir string) (*Bus, error) {
	daemon, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return nil, fmt.Errorf("dbus-daemon not found (install the dbus package): %w", err)
	}
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(busConfig, filepath.Join(dir, "bus.sock"))), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(daemon, "--config-file="+conf, "--nofork", "--print-address")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// It complains, harmlessly, when it cannot raise its descriptor limit.
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
		io.Copy(io.Discard, out)
	}()
	select {
	case addr := <-line:
		if addr == "" {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, errors.New("dbus-daemon printed no address")
		}
		return &Bus{Address: addr, cmd: cmd}, nil
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, errors.New("dbus-daemon did not print its address within 10s")
	}
}

// Stop kills the daemon.
func (b *Bus) Stop() {
	b.cmd.Process.Kill()
	b.cmd.Wait()
}

// Lock is one inhibitor lock handed out by Inhibit.
type Lock struct {
	What, Who, Why, Mode string
	released             chan struct{}
}

// Released is closed once every copy of the lock's descriptor is closed.
func (l *Lock) Released() <-chan struct{} { return l.released }

// Logind owns org.freedesktop.login1 on a bus.
type Logind struct {
	conn  *dbus.Conn
	props *prop.Properties

	mu    sync.Mutex
	locks []*Lock
	added chan struct{} // closed and replaced at every new lock
}

// Start connects to address, exports the Manager and takes the name.
func Start(address string, inhibitDelayMax time.Duration) (*Logind, error) {
	l := &Logind{added: make(chan struct{})}
	conn, err := dbus.Connect(address, dbus.WithIncomingInterceptor(func(msg *dbus.Message) {
		// Inhibit replies itself, so that it can close its copy of the lock's
		// descriptor once the reply (which carries it) is sent.
		if msg.Type == dbus.TypeMethodCall && msg.Headers[dbus.FieldMember].String() == `"Inhibit"` {
			msg.Flags |= dbus.FlagNoReplyExpected
		}
	}))
	if err != nil {
		return nil, err
	}
	l.conn = conn
	if err := conn.Export(l, path, iface); err != nil {
		conn.Close()
		return nil, err
	}
	l.props, err = prop.Export(conn, path, prop.Map{iface: {
		"InhibitDelayMaxUSec": {Value: uint64(inhibitDelayMax / time.Microsecond), Emit: prop.EmitFalse},
	}})
	if err != nil {
		conn.Close()
		return nil, err
	}
	reply, err := conn.RequestName(service, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return nil, fmt.Errorf("owning %s: reply %v, %v", service, reply, err)
	}
	return l, nil
}

// Inhibit hands out the write end of a pipe, as logind hands out a FIFO: the
// lock is held until every copy of it is closed, which the read end sees as
// end of file.
func (l *Logind) Inhibit(msg dbus.Message, what, who, why, mode string) *dbus.Error {
	r, w, err := os.Pipe()
	if err != nil {
		return dbus.MakeFailedError(err)
	}
	lock := &Lock{What: what, Who: who, Why: why, Mode: mode, released: make(chan struct{})}
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	reply := &dbus.Message{
		Type: dbus.TypeMethodReply,
		Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldDestination: dbus.MakeVariant(sender),
			dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial()),
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(dbus.UnixFD(0))),
		},
		Body: []any{dbus.UnixFD(w.Fd())},
	}
	call := <-l.conn.Send(reply, make(chan *dbus.Call, 1)).Done
	w.Close() // the reply is on the socket, which holds its own reference
	if call.Err != nil {
		r.Close()
		return dbus.MakeFailedError(call.Err)
	}
	go func() {
		io.Copy(io.Discard, r)
		r.Close()
		close(lock.released)
	}()
	l.mu.Lock()
	l.locks = append(l.locks, lock)
	close(l.added)
	l.added = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// Locks are every lock handed out so far, and a channel closed at the next.
func (l *Logind) Locks() ([]*Lock, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Lock(nil), l.locks...), l.added
}

// WaitLock waits for the n-th lock (from 0) handed out.
func (l *Logind) WaitLock(n int, timeout time.Duration) (*Lock, error) {
	deadline := time.After(timeout)
	for {
		locks, added := l.Locks()
		if len(locks) > n {
			return locks[n], nil
		}
		select {
		case <-added:
		case <-deadline:
			return nil, fmt.Errorf("%d inhibitor locks taken within %v, want %d", len(locks), timeout, n+1)
		}
	}
}

// PrepareForShutdown emits the signal logind sends when a shutdown is
// requested (true) or cancelled (false).
func (l *Logind) PrepareForShutdown(active bool) error {
	return l.conn.Emit(path, iface+".PrepareForShutdown", active)
}

// Close leaves the bus.
func (l *Logind) Close() { l.conn.Close() }
