package etcdsnapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// Member says how the restored etcd is named and reached; it must match
// the embedded etcd's configuration (internal/controlplane).
type Member struct {
	Name     string // etcd member name
	PeerURL  string // its peer URL
	Token    string // initial cluster token
	EtcdDir  string // the data dir etcd runs on (DATA_DIR/etcd)
	DataDir  string // podvisor's data dir
	Snapshot string // the file to restore
}

// Restore builds a new etcd data dir from m.Snapshot and puts it in place of
// m.EtcdDir, whose old contents are moved aside (never deleted) to the
// returned directory ("" when there was none). A file that is not a
// snapshot fails before anything is moved.
//
// Revisions are bumped and marked compacted, as etcd recommends for
// Kubernetes: clients that watched the old data never see a revision go
// back.
func Restore(m Member, now time.Time) (aside string, err error) {
	info, err := os.Stat(m.Snapshot)
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", m.Snapshot, err)
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("snapshot %s is not a file", m.Snapshot)
	}
	stamp := strconv.FormatInt(now.Unix(), 10)
	tmp := filepath.Join(m.DataDir, "db", ".restore-"+stamp)
	if err := os.MkdirAll(filepath.Dir(tmp), 0o700); err != nil {
		return "", err
	}
	os.RemoveAll(tmp)
	if err := restoreInto(m, tmp); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("%s is not an etcd snapshot podvisor can restore: %w", m.Snapshot, err)
	}
	if _, err := os.Stat(m.EtcdDir); err == nil {
		// k3s's place for the data a reset replaced: db/etcd-old-<time>.
		aside = filepath.Join(m.DataDir, "db", "etcd-old-"+stamp)
		if err := os.Rename(m.EtcdDir, aside); err != nil {
			os.RemoveAll(tmp)
			return "", fmt.Errorf("moving %s aside: %w", m.EtcdDir, err)
		}
	}
	if err := os.Rename(tmp, m.EtcdDir); err != nil {
		if aside != "" {
			os.Rename(aside, m.EtcdDir)
		}
		return "", fmt.Errorf("putting the restored etcd in place: %w", err)
	}
	return aside, nil
}

// restoreInto runs etcdutl's restore; bbolt panics on some files that are
// not databases, which must not take podvisor down.
func restoreInto(m Member, dir string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        m.Snapshot,
		Name:                m.Name,
		OutputDataDir:       dir,
		PeerURLs:            []string{m.PeerURL},
		InitialCluster:      m.Name + "=" + m.PeerURL,
		InitialClusterToken: m.Token,
		RevisionBump:        1_000_000_000,
		MarkCompacted:       true,
	})
}

// Restored records the snapshot a data dir was last restored from, so that
// a restore flag left in place (in a service's unit, say) does not restore
// the same file again at every start and lose what happened since.
type Restored struct {
	Snapshot string    `json:"snapshot"`
	Size     int64     `json:"size"`
	ModTime  time.Time `json:"modTime"`
	At       time.Time `json:"restoredAt"`
}

func restoredPath(dataDir string) string { return filepath.Join(dataDir, "db", "restored.json") }

// LastRestored reads the record; ok is false when there is none.
func LastRestored(dataDir string) (r Restored, ok bool) {
	b, err := os.ReadFile(restoredPath(dataDir))
	if err != nil || json.Unmarshal(b, &r) != nil {
		return Restored{}, false
	}
	return r, true
}

// SameFile decides whether the snapshot file is the one last restored:
// the same path, size and modification time.
func SameFile(last Restored, path string, info os.FileInfo) bool {
	return last.Snapshot == path && last.Size == info.Size() && last.ModTime.Equal(info.ModTime())
}

// RecordRestore writes the record after a restore.
func RecordRestore(dataDir, path string, now time.Time) error {
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(Restored{Snapshot: path, Size: info.Size(), ModTime: info.ModTime(), At: now}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(restoredPath(dataDir), append(b, '\n'), 0o600); err != nil {
		return errors.Join(fmt.Errorf("recording the restore"), err)
	}
	return nil
}
