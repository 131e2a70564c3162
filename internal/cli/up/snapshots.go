package up

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cluster/etcdsnapshot"
)

// snapshotSchedule checks the snapshot flags before anything starts; a nil
// scheduler means snapshots are off.
func snapshotSchedule(o *etcdsnapshot.Options, dir, node string, clientPort int, log *slog.Logger) (*etcdsnapshot.Scheduler, error) {
	if o.RestorePath != "" {
		abs, err := filepath.Abs(o.RestorePath)
		if err != nil {
			return nil, fmt.Errorf("--cluster-reset-restore-path: %w", err)
		}
		o.RestorePath = abs
	}
	if o.Disabled {
		return nil, nil
	}
	if o.Retention < 0 {
		return nil, fmt.Errorf("--etcd-snapshot-retention %d: want 0 (keep all) or more", o.Retention)
	}
	sched, err := etcdsnapshot.ParseCron(o.Cron)
	if err != nil {
		return nil, err
	}
	return &etcdsnapshot.Scheduler{Schedule: sched, Retention: o.Retention, DataDir: dir,
		Endpoint: etcdsnapshot.Endpoint(clientPort), Node: node, Clock: clock.RealClock{}, Log: log}, nil
}

// runSnapshots takes the scheduled snapshots until ctx ends.
func runSnapshots(ctx context.Context, s *etcdsnapshot.Scheduler) {
	if s != nil {
		go s.Run(ctx)
	}
}

// SnapshotNode is the node name a data dir's snapshots carry: its node's,
// or the machine's for a server's.
func SnapshotNode(st datadir.State) string {
	if st.NodeName != "" {
		return st.NodeName
	}
	return defaultNodeName()
}
