package localpath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// Config is one node's provisioner.
type Config struct {
	Client   kubernetes.Interface
	NodeName string
	Root     string // the volumes' directories: DATA_DIR/storage by default
	Log      *slog.Logger
}

// Run provisions and deletes this node's volumes until ctx ends. Every node
// runs its own controller, so there is no leader election: each acts only
// on its own claims (forNode) and PVs (ownedBy).
func Run(ctx context.Context, cfg Config) error {
	if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
		return fmt.Errorf("local-path storage root: %w", err)
	}
	p := &provisioner{cfg: cfg}
	pc := controller.NewProvisionController(ctx, cfg.Client, ProvisionerName, p,
		controller.LeaderElection(false),
		controller.Threadiness(2),
	)
	cfg.Log.Info("local-path provisioner started", "provisioner", ProvisionerName, "root", cfg.Root)
	pc.Run(ctx)
	return nil
}

type provisioner struct{ cfg Config }

// ShouldProvision (controller.Qualifier) keeps other nodes' claims from
// even being tried here.
func (p *provisioner) ShouldProvision(_ context.Context, pvc *v1.PersistentVolumeClaim) bool {
	return forNode(pvc, p.cfg.NodeName)
}

// ShouldDelete (controller.DeletionGuard): only the node that made a
// directory removes it.
func (p *provisioner) ShouldDelete(_ context.Context, pv *v1.PersistentVolume) bool {
	return ownedBy(pv, p.cfg.NodeName, p.cfg.Root)
}

func (p *provisioner) Provision(_ context.Context, o controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	if o.SelectedNodeName != p.cfg.NodeName {
		return nil, controller.ProvisioningFinished, &controller.IgnoredError{Reason: "the claim is for node " + o.SelectedNodeName}
	}
	pv, dir, err := volumeFor(Request{PVName: o.PVName, PVC: o.PVC, Class: o.StorageClass, Node: p.cfg.NodeName, Root: p.cfg.Root})
	if err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	// World-writable, as k3s's: the pod's user is not known here.
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, fmt.Errorf("creating %s: %w", dir, err)
	}
	p.cfg.Log.Info("local-path volume provisioned", "pv", pv.Name, "claim", o.PVC.Namespace+"/"+o.PVC.Name, "dir", dir)
	return pv, controller.ProvisioningFinished, nil
}

func (p *provisioner) Delete(_ context.Context, pv *v1.PersistentVolume) error {
	if !ownedBy(pv, p.cfg.NodeName, p.cfg.Root) {
		return &controller.IgnoredError{Reason: "the volume is not a directory of this node"}
	}
	dir, err := volumeDir(pv, p.cfg.Root)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	p.cfg.Log.Info("local-path volume deleted", "pv", pv.Name, "dir", dir)
	return nil
}
