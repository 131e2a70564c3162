package agentup

import (
	"log/slog"

	"github.com/podvisor/podvisor/internal/cli/service"
)

// NotifyReady tells systemd (a Type=notify unit, 'podvisor install') that
// podvisor is ready; outside systemd it does nothing.
func NotifyReady(log *slog.Logger, n service.Notifier, status string) {
	if sent, err := n.Ready(status); err != nil {
		log.Warn("telling systemd podvisor is ready", "err", err)
	} else if sent {
		log.Info("told systemd podvisor is ready")
	}
}
