package etcdsnapshot

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"
)

// Endpoint is the embedded etcd's client URL for its recorded port.
func Endpoint(clientPort int) string { return fmt.Sprintf("http://127.0.0.1:%d", clientPort) }

// ErrNotRunning says the data dir's etcd does not answer: a snapshot is
// taken from the running etcd, never from its files.
type ErrNotRunning struct {
	DataDir  string
	Endpoint string
}

func (e ErrNotRunning) Error() string {
	return fmt.Sprintf("podvisor is not running on data dir %s (its etcd at %s does not answer): start it ('podvisor up' or 'server') to take a snapshot; ls and delete work while it is stopped", e.DataDir, e.Endpoint)
}

// IdentityKey holds, in the embedded etcd, the absolute path of the data
// dir it belongs to (written at every start), so that a snapshot is never
// taken of another podvisor's etcd that happens to use the port a stopped
// data dir recorded.
const IdentityKey = "/podvisor/data-dir"

// Save streams a snapshot from the etcd at endpoint into the data dir's
// snapshot directory as <name>-<node>-<unix time of now>.
func Save(ctx context.Context, dataDir, endpoint, name, node string, now time.Time) (Snapshot, error) {
	if err := CheckName(name); err != nil {
		return Snapshot{}, err
	}
	if err := reachable(endpoint); err != nil {
		return Snapshot{}, ErrNotRunning{DataDir: dataDir, Endpoint: endpoint}
	}
	if err := os.MkdirAll(Dir(dataDir), 0o700); err != nil {
		return Snapshot{}, err
	}
	file := FileName(name, node, now)
	path := filepath.Join(Dir(dataDir), file)
	if _, err := os.Stat(path); err == nil {
		return Snapshot{}, fmt.Errorf("snapshot %s exists already", path)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cfg := clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second}
	if err := checkIdentity(ctx, cfg, dataDir); err != nil {
		return Snapshot{}, err
	}
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), cfg, path); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot of etcd at %s: %w", endpoint, err)
	}
	info, err := os.Stat(path)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Name: file, Path: path, Size: info.Size(), Created: time.Unix(now.Unix(), 0)}, nil
}

func reachable(endpoint string) error {
	host := endpoint
	if len(host) > len("http://") && host[:len("http://")] == "http://" {
		host = host[len("http://"):]
	}
	c, err := net.DialTimeout("tcp", host, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// checkIdentity refuses an etcd that says it is another data dir's; one
// that says nothing (started by an older podvisor) is taken as this one's.
func checkIdentity(ctx context.Context, cfg clientv3.Config, dataDir string) error {
	cfg.Logger = zap.NewNop()
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, IdentityKey)
	if err != nil {
		return fmt.Errorf("etcd at %s: %w", cfg.Endpoints[0], err)
	}
	if len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) != dataDir {
		return fmt.Errorf("the etcd at %s is data dir %s's, not %s's: that podvisor took the port %s recorded while it was stopped; start this one to snapshot it",
			cfg.Endpoints[0], resp.Kvs[0].Value, dataDir, dataDir)
	}
	return nil
}
