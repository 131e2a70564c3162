// Package etcdsnapshot takes, lists, prunes and restores snapshots of the
// embedded etcd, laid out as k3s lays them out: DATA_DIR/db/snapshots, one
// file per snapshot named <name>-<node>-<unix time>.
package etcdsnapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Names k3s gives snapshots taken on demand and by the schedule.
const (
	OnDemandName  = "on-demand"
	ScheduledName = "etcd-snapshot"
)

// Snapshot is one snapshot file.
type Snapshot struct {
	Name    string // the file name
	Path    string
	Size    int64
	Created time.Time
}

// Dir is where a data dir's snapshots live (k3s: server/db/snapshots).
func Dir(dataDir string) string { return filepath.Join(dataDir, "db", "snapshots") }

// FileName is a snapshot's file name: <name>-<node>-<unix time>.
func FileName(name, node string, t time.Time) string {
	return fmt.Sprintf("%s-%s-%d", name, node, t.Unix())
}

// CheckName refuses names that would leave the snapshot directory or hide
// the file.
func CheckName(name string) error {
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("snapshot name %q: want a plain file name (no '/', not starting with '.')", name)
	}
	return nil
}

// createdAt reads the unix time a snapshot's name ends with; false when
// the name has none (a file a user put there).
func createdAt(name string) (time.Time, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
}

// List returns the snapshots under dataDir, oldest first; none when the
// directory does not exist yet.
func List(dataDir string) ([]Snapshot, error) {
	entries, err := os.ReadDir(Dir(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, e := range entries {
		// Hidden files are snapshots being written (etcd's client writes
		// NAME.part; ours go through a dot-file).
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || strings.HasSuffix(e.Name(), ".part") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		t, ok := createdAt(e.Name())
		if !ok {
			t = info.ModTime()
		}
		out = append(out, Snapshot{Name: e.Name(), Path: filepath.Join(Dir(dataDir), e.Name()), Size: info.Size(), Created: t})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// Delete removes the snapshot called name.
func Delete(dataDir, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	p := filepath.Join(Dir(dataDir), name)
	if err := os.Remove(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no snapshot %q in %s", name, Dir(dataDir))
		}
		return err
	}
	return nil
}

// ToPrune decides which snapshots retention removes: of those whose name
// starts with prefix (one node's scheduled snapshots, as k3s prunes), all
// but the keep newest. Others (on-demand snapshots, a user's files) are
// never pruned. keep < 1 keeps everything.
func ToPrune(snaps []Snapshot, prefix string, keep int) []Snapshot {
	if keep < 1 {
		return nil
	}
	var mine []Snapshot
	for _, s := range snaps {
		if strings.HasPrefix(s.Name, prefix) {
			mine = append(mine, s)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool {
		if !mine[i].Created.Equal(mine[j].Created) {
			return mine[i].Created.After(mine[j].Created)
		}
		return mine[i].Name > mine[j].Name
	})
	if len(mine) <= keep {
		return nil
	}
	return mine[keep:]
}

// ScheduledPrefix is the name prefix of a node's scheduled snapshots.
func ScheduledPrefix(node string) string { return ScheduledName + "-" + node + "-" }
