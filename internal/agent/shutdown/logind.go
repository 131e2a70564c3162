package shutdown

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	v1 "k8s.io/api/core/v1"
)

// systemd-logind's D-Bus names.
const (
	logindService   = "org.freedesktop.login1"
	logindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	logindInterface = "org.freedesktop.login1.Manager"
)

// InhibitDelayEventReason is the reason of the Warning event on the node when
// logind would not wait as long as the configured grace periods.
const InhibitDelayEventReason = "InhibitDelayTooShort"

// reconnectAfter is how long WatchLogind waits before it tries the bus again
// after losing it.
const reconnectAfter = 5 * time.Second

// WatchLogind holds a systemd-logind "delay" inhibitor lock and turns
// PrepareForShutdown(true) into Shutdown (releasing the lock once the pods
// are stopped, so that the machine goes down) and PrepareForShutdown(false)
// into Cancel (taking the lock again). busAddress "" is the system bus
// (DBUS_SYSTEM_BUS_ADDRESS is honoured). Without logind it logs one line and
// returns: `podvisor node shutdown` is the trigger then. It returns when ctx
// ends.
func (m *Manager) WatchLogind(ctx context.Context, busAddress string) {
	if !m.Enabled() {
		return
	}
	lost := false
	for ctx.Err() == nil {
		w, err := m.connectLogind(busAddress)
		if err != nil {
			if !lost {
				m.cfg.Log.Info("systemd-logind is not reachable over D-Bus; graceful node shutdown can be triggered with `podvisor node shutdown`", "err", err)
				return
			}
			// It was there: logind or the bus restarts; keep trying quietly.
		} else {
			if lost {
				m.cfg.Log.Info("reconnected to systemd-logind")
			}
			w.run(ctx)
			w.close()
			if ctx.Err() != nil {
				return
			}
			m.cfg.Log.Warn("lost the connection to systemd-logind; reconnecting", "after", reconnectAfter)
			lost = true
		}
		t := m.cfg.Clock.NewTimer(reconnectAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// logindWatch is one connection to logind with its lock.
type logindWatch struct {
	m       *Manager
	conn    *dbus.Conn
	signals chan *dbus.Signal

	mu   sync.Mutex
	lock int // the inhibitor's file descriptor; -1 when not held
}

func (m *Manager) connectLogind(address string) (*logindWatch, error) {
	// The connection is not bound to ctx: godbus closes a bound one when
	// ctx ends, abandoning a call in flight, and a reply to Inhibit read
	// after that carries a lock descriptor nobody closes (logind would wait
	// for it until InhibitDelayMaxSec). Calls finish; close() ends it.
	var conn *dbus.Conn
	var err error
	if address == "" {
		conn, err = dbus.ConnectSystemBus()
	} else {
		conn, err = dbus.Connect(address)
	}
	if err != nil {
		return nil, err
	}
	w := &logindWatch{m: m, conn: conn, lock: -1, signals: make(chan *dbus.Signal, 16)}
	obj := conn.Object(logindService, logindPath)
	v, err := obj.GetProperty(logindInterface + ".InhibitDelayMaxUSec")
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("reading logind's InhibitDelayMaxUSec: %w", err)
	}
	if usec, ok := v.Value().(uint64); ok {
		m.checkInhibitDelay(time.Duration(usec) * time.Microsecond)
	}
	// Subscribe before taking the lock, so that no signal falls in between.
	if err := conn.AddMatchSignal(dbus.WithMatchInterface(logindInterface), dbus.WithMatchMember("PrepareForShutdown"),
		dbus.WithMatchObjectPath(logindPath)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("watching PrepareForShutdown: %w", err)
	}
	conn.Signal(w.signals)
	if err := w.acquire(); err != nil {
		conn.Close()
		return nil, err
	}
	m.cfg.Log.Info("holding a systemd-logind delay inhibitor lock for graceful node shutdown", "maxDelay", Total(m.cfg.Bands))
	return w, nil
}

// checkInhibitDelay warns when logind would stop waiting before the pods had
// their grace periods. Upstream rewrites logind.conf; podvisor only says so.
func (m *Manager) checkInhibitDelay(max time.Duration) {
	want := Total(m.cfg.Bands)
	if max >= want {
		return
	}
	msg := fmt.Sprintf("systemd-logind's InhibitDelayMaxSec (%s) is shorter than the configured shutdown grace periods (%s): "+
		"the machine will go down before pods have had their time; set InhibitDelayMaxSec=%d in /etc/systemd/logind.conf.d/ and restart systemd-logind",
		max, want, int64(want/time.Second))
	m.cfg.Log.Warn(msg)
	m.cfg.Recorder.Event(m.nodeRef, v1.EventTypeWarning, InhibitDelayEventReason, msg)
}

// acquire takes the delay lock unless it is held.
func (w *logindWatch) acquire() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lock >= 0 {
		return nil
	}
	var fd dbus.UnixFD
	err := w.conn.Object(logindService, logindPath).Call(logindInterface+".Inhibit", 0,
		"shutdown", "podvisor", "podvisor stops pods before the node shuts down", "delay").Store(&fd)
	if err != nil {
		return fmt.Errorf("taking a logind inhibitor lock: %w", err)
	}
	w.lock = int(fd)
	return nil
}

// release lets the shutdown go on.
func (w *logindWatch) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lock < 0 {
		return
	}
	if err := syscall.Close(w.lock); err != nil {
		w.m.cfg.Log.Warn("releasing the logind inhibitor lock", "err", err)
	}
	w.lock = -1
}

func (w *logindWatch) close() {
	w.release()
	w.conn.RemoveSignal(w.signals)
	w.conn.Close()
}

// run handles PrepareForShutdown until ctx ends or the connection is lost.
func (w *logindWatch) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case sig, ok := <-w.signals:
			if !ok {
				return
			}
			if sig == nil || sig.Name != logindInterface+".PrepareForShutdown" || len(sig.Body) == 0 {
				if w.conn.Connected() {
					continue
				}
				return
			}
			active, ok := sig.Body[0].(bool)
			if !ok {
				continue
			}
			if active {
				done, err := w.m.Shutdown("logind")
				if err != nil {
					w.m.cfg.Log.Error("node shutdown", "err", err)
					w.release()
					continue
				}
				go func() {
					select {
					case <-done:
					case <-ctx.Done():
						return
					}
					// A cancel may have come first: then the lock is taken
					// again and must be kept.
					if w.m.isCurrent(done) {
						w.m.cfg.Log.Info("node shutdown: releasing the logind inhibitor lock")
						w.release()
					}
				}()
				continue
			}
			w.m.Cancel("logind")
			if err := w.acquire(); err != nil {
				w.m.cfg.Log.Warn("node shutdown cancelled but the logind lock could not be taken again", "err", err)
			}
		}
	}
}
