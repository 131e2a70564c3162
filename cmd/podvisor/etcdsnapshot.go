package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/up"
	"github.com/podvisor/podvisor/internal/cluster/etcdsnapshot"
)

const etcdSnapshotUsage = `Usage: podvisor etcd-snapshot save [--name NAME] | ls | delete NAME... | prune [--name NAME] [--snapshot-retention N] [--data-dir DIR]

Snapshots of the embedded etcd (every object of the cluster), as files in
DATA_DIR/db/snapshots named NAME-NODE-UNIXTIME (NAME: on-demand unless given;
the schedule of 'up' and 'server' names its own etcd-snapshot).
save needs podvisor running on the data dir (it streams the snapshot from
its etcd); ls, delete and prune work on the files, running or not. prune keeps
the newest N (5) snapshots named NAME (on-demand) of this node and deletes the rest.
Restore one with 'podvisor up --cluster-reset-restore-path FILE'.
`

// snapshotFlags are the etcd snapshot flags of up and server.
func snapshotFlags(fs *flag.FlagSet, o *etcdsnapshot.Options) {
	fs.StringVar(&o.Cron, "etcd-snapshot-schedule-cron", etcdsnapshot.DefaultCron, "when to take etcd snapshots, in cron's five fields (into DATA_DIR/db/snapshots)")
	fs.IntVar(&o.Retention, "etcd-snapshot-retention", etcdsnapshot.DefaultRetention, "scheduled etcd snapshots kept (0: all)")
	fs.BoolVar(&o.Disabled, "etcd-disable-snapshots", false, "take no scheduled etcd snapshots")
	fs.StringVar(&o.RestorePath, "cluster-reset-restore-path", "", "restore etcd from this snapshot file before starting (the previous etcd data is moved to DATA_DIR/db/etcd-old-TIME)")
}

type etcdSnapshotOptions struct {
	dataDir, name string
	retention     int
}

// etcdSnapshotFlags are the flags of etcd-snapshot SUB (the config file's
// keys too).
func etcdSnapshotFlags(sub string, o *etcdSnapshotOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor etcd-snapshot "+sub, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, etcdSnapshotUsage); fs.PrintDefaults() }
	fs.StringVar(&o.dataDir, "data-dir", datadir.Default(), "data directory of the podvisor")
	fs.StringVar(&o.name, "name", etcdsnapshot.OnDemandName, "save, prune: the snapshots' name (before -NODE-UNIXTIME)")
	fs.IntVar(&o.retention, "snapshot-retention", etcdsnapshot.DefaultRetention, "prune: how many to keep")
	return fs
}

func runEtcdSnapshot(args []string) error {
	if len(args) == 0 || (args[0] != "save" && args[0] != "ls" && args[0] != "list" && args[0] != "delete" && args[0] != "prune") {
		return fmt.Errorf("%s", etcdSnapshotUsage)
	}
	sub := args[0]
	o := etcdSnapshotOptions{}
	fs := etcdSnapshotFlags(sub, &o)
	dataDir, name, retention := &o.dataDir, &o.name, &o.retention
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if _, err := os.Stat(*dataDir); err != nil {
		return fmt.Errorf("data dir %s: %w", *dataDir, err)
	}
	abs, err := filepath.Abs(*dataDir)
	if err != nil {
		return err
	}
	dataDir = &abs
	switch sub {
	case "save":
		if fs.NArg() > 0 {
			return fmt.Errorf("save takes no arguments, got %q", fs.Args())
		}
		st, err := datadir.Open(*dataDir)
		if err != nil {
			return err
		}
		if st.EtcdClientPort == 0 {
			return fmt.Errorf("data dir %s has never run podvisor: there is no etcd to snapshot", *dataDir)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		s, err := etcdsnapshot.Save(ctx, *dataDir, etcdsnapshot.Endpoint(st.EtcdClientPort), *name, up.SnapshotNode(st), time.Now())
		if err != nil {
			return err
		}
		fmt.Printf("saved %s (%d bytes)\n", s.Path, s.Size)
	case "ls", "list":
		snaps, err := etcdsnapshot.List(*dataDir)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 8, 1, ' ', 0)
		fmt.Fprintln(w, "Name\tLocation\tSize\tCreated")
		for _, s := range snaps {
			fmt.Fprintf(w, "%s\tfile://%s\t%d\t%s\n", s.Name, s.Path, s.Size, s.Created.UTC().Format(time.RFC3339))
		}
		return w.Flush()
	case "prune":
		if *retention < 1 {
			return fmt.Errorf("prune: --snapshot-retention %d: keep at least 1", *retention)
		}
		st, err := datadir.Open(*dataDir)
		if err != nil {
			return err
		}
		all, err := etcdsnapshot.List(*dataDir)
		if err != nil {
			return err
		}
		for _, s := range etcdsnapshot.ToPrune(all, *name+"-"+up.SnapshotNode(st)+"-", *retention) {
			if err := etcdsnapshot.Delete(*dataDir, s.Name); err != nil {
				return err
			}
			fmt.Printf("deleted %s\n", s.Name)
		}
	case "delete":
		if fs.NArg() == 0 {
			return fmt.Errorf("delete: name the snapshot(s) to delete (see 'podvisor etcd-snapshot ls')")
		}
		for _, n := range fs.Args() {
			if err := etcdsnapshot.Delete(*dataDir, n); err != nil {
				return err
			}
			fmt.Printf("deleted %s\n", n)
		}
	}
	return nil
}
