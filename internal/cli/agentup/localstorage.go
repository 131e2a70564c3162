package agentup

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/cluster/localpath"
)

// LocalStorageOptions are the flags of the built-in local-path provisioner.
type LocalStorageOptions struct {
	Disable bool   // --disable-local-storage
	Path    string // --default-local-storage-path; "": DATA_DIR/storage
}

// root is where this node's volumes live; a relative --default-local-storage-path
// is taken from the working directory (PVs name absolute paths).
func (o LocalStorageOptions) root(dataDir string) (string, error) {
	if o.Path != "" {
		return filepath.Abs(o.Path)
	}
	return filepath.Join(dataDir, "storage"), nil
}

// StartLocalStorage runs this node's local-path provisioner unless
// --disable-local-storage. Failures are log lines; the node runs on.
func StartLocalStorage(ctx context.Context, o LocalStorageOptions, log *slog.Logger, kubeconfig, nodeName, dataDir string) {
	if o.Disable {
		log.Info("local-path provisioner disabled (--disable-local-storage): this node provisions no volumes")
		return
	}
	root, err := o.root(dataDir)
	if err != nil {
		log.Error("local-path provisioner not started", "err", err)
		return
	}
	client, err := clientFor(kubeconfig)
	if err != nil {
		log.Error("local-path provisioner not started", "err", err)
		return
	}
	go func() {
		if err := localpath.Run(ctx, localpath.Config{Client: client, NodeName: nodeName, Root: root, Log: log}); err != nil {
			log.Error("local-path provisioner stopped", "err", err)
		}
	}()
}

// PublishLocalStorage is the server's part: the default StorageClass and
// the nodes' RBAC, retried until the API takes them.
func PublishLocalStorage(ctx context.Context, o LocalStorageOptions, log *slog.Logger, kubeconfig string) {
	if o.Disable {
		log.Info("local storage disabled (--disable-local-storage): no local-path StorageClass")
		return
	}
	client, err := clientFor(kubeconfig)
	if err != nil {
		log.Error("local-path StorageClass not made", "err", err)
		return
	}
	go func() {
		for {
			err := localpath.EnsureClusterObjects(ctx, client)
			if err == nil {
				return
			}
			log.Error("local-path StorageClass not made yet", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Second):
			}
		}
	}()
}

func clientFor(kubeconfig string) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}
