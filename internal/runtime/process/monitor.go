package process

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// monitor learns of shim exits without polling: each shim is a pidfd in one
// epoll set, served by one goroutine for all containers.
type monitor struct {
	epfd   int
	wakefd int // eventfd: wakes the loop to stop
	onExit func(id string)

	mu      sync.Mutex
	watches map[int32]string // pidfd → instance id
	closed  bool
	done    chan struct{}
}

func newMonitor(onExit func(id string)) (*monitor, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("epoll add: %w", err)
	}
	m := &monitor{epfd: epfd, wakefd: wakefd, onExit: onExit, watches: map[int32]string{}, done: make(chan struct{})}
	go m.loop()
	return m, nil
}

// watch takes ownership of pidfd and calls onExit(id) once the process
// exits (at once if it already has).
func (m *monitor) watch(id string, pidfd int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		unix.Close(pidfd)
		return errors.New("runtime closed")
	}
	m.watches[int32(pidfd)] = id
	if err := unix.EpollCtl(m.epfd, unix.EPOLL_CTL_ADD, pidfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(pidfd)}); err != nil {
		delete(m.watches, int32(pidfd))
		unix.Close(pidfd)
		return fmt.Errorf("epoll add pidfd: %w", err)
	}
	return nil
}

func (m *monitor) loop() {
	defer close(m.done)
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(m.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // only a closed epfd gets here
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == m.wakefd {
				m.shutdown()
				return
			}
			if id, ok := m.forget(ev.Fd); ok {
				m.onExit(id)
			}
		}
	}
}

// forget drops a pidfd whose process exited, reaping the process if it is
// our child (a shim this agent process started; a re-adopted one is not).
func (m *monitor) forget(fd int32) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.watches[fd]
	if !ok {
		return "", false
	}
	delete(m.watches, fd)
	unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	var info unix.Siginfo
	unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil) // ECHILD if not ours
	unix.Close(int(fd))
	return id, true
}

func (m *monitor) shutdown() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for fd := range m.watches {
		unix.Close(int(fd))
	}
	m.watches = nil
	unix.Close(m.wakefd)
	unix.Close(m.epfd)
}

// close stops the loop; shims keep running and a later runtime re-adopts them.
func (m *monitor) close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.mu.Unlock()
	unix.Write(m.wakefd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-m.done
}
