package etcdsnapshot

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/robfig/cron/v3"
	"k8s.io/utils/clock"
)

// k3s's defaults: at minute 0 of every twelfth hour, the 5 newest kept.
const (
	DefaultCron      = "0 */12 * * *"
	DefaultRetention = 5
)

// Options are the snapshot flags of up and server.
type Options struct {
	Cron        string // --etcd-snapshot-schedule-cron
	Retention   int    // --etcd-snapshot-retention
	Disabled    bool   // --etcd-disable-snapshots
	RestorePath string // --cluster-reset-restore-path
}

// ParseCron checks a five-field cron expression (and @every, @daily, …).
func ParseCron(spec string) (cron.Schedule, error) {
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("--etcd-snapshot-schedule-cron %q: %v", spec, err)
	}
	return s, nil
}

// Scheduler takes a node's scheduled snapshots and prunes the old ones.
type Scheduler struct {
	Schedule  cron.Schedule
	Retention int
	DataDir   string
	Endpoint  string
	Node      string
	Clock     clock.Clock
	Log       *slog.Logger
}

// Run takes a snapshot at each time of the schedule until ctx ends. A
// failed snapshot is logged and the next one is still taken.
func (s Scheduler) Run(ctx context.Context) {
	for {
		now := s.Clock.Now()
		next := s.Schedule.Next(now)
		t := s.Clock.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		s.once(ctx)
	}
}

func (s Scheduler) once(ctx context.Context) {
	snap, err := Save(ctx, s.DataDir, s.Endpoint, ScheduledName, s.Node, s.Clock.Now())
	if err != nil {
		s.Log.Error("scheduled etcd snapshot failed", "err", err)
		return
	}
	s.Log.Info("etcd snapshot saved", "path", snap.Path, "size", snap.Size)
	all, err := List(s.DataDir)
	if err != nil {
		s.Log.Error("listing etcd snapshots for retention", "err", err)
		return
	}
	for _, old := range ToPrune(all, ScheduledPrefix(s.Node), s.Retention) {
		if err := os.Remove(old.Path); err != nil {
			s.Log.Error("pruning etcd snapshot", "path", old.Path, "err", err)
			continue
		}
		s.Log.Info("etcd snapshot pruned", "path", old.Path, "retention", s.Retention)
	}
}
