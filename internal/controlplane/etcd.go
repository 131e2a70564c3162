package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap/zapcore"

	"github.com/podvisor/podvisor/internal/cluster/etcdsnapshot"
)

// The embedded etcd's member name and cluster token; a restored snapshot
// must be given the same.
const (
	etcdName  = "podvisor"
	etcdToken = "etcd-cluster"
)

// EtcdDir is the embedded etcd's data dir.
func EtcdDir(dataDir string) string { return filepath.Join(dataDir, "etcd") }

func etcdPeerURL(peerPort int) url.URL {
	return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
}

// restoreEtcd replaces the etcd data dir with the snapshot file's contents
// (the old one moved aside), before etcd starts.
func restoreEtcd(cfg Config) error {
	if last, ok := etcdsnapshot.LastRestored(cfg.DataDir); ok {
		if info, err := os.Stat(cfg.RestoreSnapshot); err == nil && etcdsnapshot.SameFile(last, cfg.RestoreSnapshot, info) {
			slog.Warn("etcd was restored from this snapshot already: not restoring it again (remove --cluster-reset-restore-path)",
				"snapshot", cfg.RestoreSnapshot, "restoredAt", last.At)
			return nil
		}
	}
	peer := etcdPeerURL(cfg.EtcdPeerPort)
	now := time.Now()
	aside, err := etcdsnapshot.Restore(etcdsnapshot.Member{
		Name: etcdName, PeerURL: peer.String(), Token: etcdToken,
		EtcdDir: EtcdDir(cfg.DataDir), DataDir: cfg.DataDir, Snapshot: cfg.RestoreSnapshot,
	}, now)
	if err != nil {
		return err
	}
	slog.Warn("etcd restored from a snapshot; the previous etcd data is kept aside",
		"snapshot", cfg.RestoreSnapshot, "previous", aside)
	return etcdsnapshot.RecordRestore(cfg.DataDir, cfg.RestoreSnapshot, now)
}

// markEtcd writes which data dir this etcd is, for etcd-snapshot save.
func markEtcd(e *embed.Etcd, dataDir string) error {
	c := v3client.New(e.Server)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, etcdsnapshot.IdentityKey, dataDir); err != nil {
		e.Close()
		return fmt.Errorf("recording the data dir in etcd: %w", err)
	}
	return nil
}

// startEtcd runs a single-member etcd on loopback with its data in
// EtcdDir(dataDir).
func startEtcd(dataDir string, clientPort, peerPort int, logFile string) (*embed.Etcd, error) {
	dir := EtcdDir(dataDir)
	cfg := embed.NewConfig()
	cfg.Name = etcdName
	cfg.InitialClusterToken = etcdToken
	cfg.Dir = dir
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peer := etcdPeerURL(peerPort)
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = zapcore.ErrorLevel.String()
	cfg.LogOutputs = []string{logFile}
	// A single member on one machine: compaction keeps the database small.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	cfg.QuotaBackendBytes = 2 << 30
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, markEtcd(e, dataDir)
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd did not become ready within 60s")
	}
}
