package service

import (
	"os"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier reports to systemd for a Type=notify unit.
//
// The embedded kube-apiserver sends its own READY=1 as soon as it serves,
// long before the node is Ready, and then unsets NOTIFY_SOCKET. So podvisor
// takes the socket out of the environment before anything starts (as k3s
// does) and puts it back only for its own notifications.
type Notifier struct{ socket string }

// TakeNotifySocket removes NOTIFY_SOCKET from the environment and returns a
// Notifier for it; without one (not under systemd) the Notifier does
// nothing.
func TakeNotifySocket() Notifier {
	s := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	return Notifier{socket: s}
}

// Ready sends READY=1 with a status line; false when there is no socket.
func (n Notifier) Ready(status string) (bool, error) {
	return n.send(daemon.SdNotifyReady + "\nSTATUS=" + status)
}

// Stopping sends STOPPING=1.
func (n Notifier) Stopping() { _, _ = n.send(daemon.SdNotifyStopping) }

func (n Notifier) send(state string) (bool, error) {
	if n.socket == "" {
		return false, nil
	}
	os.Setenv("NOTIFY_SOCKET", n.socket)
	return daemon.SdNotify(true, state) // unsets it again
}
