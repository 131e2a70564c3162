package csinode

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Writer updates the CSINode named after this node, with the node's own
// client (the NodeRestriction admission lets a node write only its own).
type Writer struct {
	Client   kubernetes.Interface
	NodeName string
}

// Ensure creates the node's CSINode with no drivers if it does not exist,
// as the kubelet does at start, owned by the Node so it goes with it.
func (w Writer) Ensure(ctx context.Context) (*storagev1.CSINode, error) {
	c, err := w.Client.StorageV1().CSINodes().Get(ctx, w.NodeName, metav1.GetOptions{})
	if err == nil {
		return c, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading CSINode %s: %w", w.NodeName, err)
	}
	node, err := w.Client.CoreV1().Nodes().Get(ctx, w.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Node %s to own its CSINode: %w", w.NodeName, err)
	}
	c = &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{
			Name: w.NodeName,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: corev1.SchemeGroupVersion.Version, Kind: "Node", Name: node.Name, UID: node.UID,
			}},
		},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{}},
	}
	created, err := w.Client.StorageV1().CSINodes().Create(ctx, c, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return w.Client.StorageV1().CSINodes().Get(ctx, w.NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("creating CSINode %s: %w", w.NodeName, err)
	}
	return created, nil
}

// Install puts a driver's entry into the CSINode (creating it if needed),
// retrying on conflicts with other writers.
func (w Writer) Install(ctx context.Context, d storagev1.CSINodeDriver) error {
	return w.update(ctx, true, func(drivers []storagev1.CSINodeDriver) ([]storagev1.CSINodeDriver, bool) {
		return WithDriver(drivers, d)
	})
}

// Uninstall removes a driver's entry; a missing CSINode or entry is fine.
func (w Writer) Uninstall(ctx context.Context, name string) error {
	return w.update(ctx, false, func(drivers []storagev1.CSINodeDriver) ([]storagev1.CSINodeDriver, bool) {
		return WithoutDriver(drivers, name)
	})
}

// update applies change to the CSINode's drivers; create says whether a
// missing CSINode is created (to install) or means nothing to do.
func (w Writer) update(ctx context.Context, create bool, change func([]storagev1.CSINodeDriver) ([]storagev1.CSINodeDriver, bool)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c *storagev1.CSINode
		var err error
		if create {
			c, err = w.Ensure(ctx)
		} else {
			c, err = w.Client.StorageV1().CSINodes().Get(ctx, w.NodeName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
		}
		if err != nil {
			return err
		}
		drivers, changed := change(c.Spec.Drivers)
		if !changed {
			return nil
		}
		c = c.DeepCopy()
		c.Spec.Drivers = drivers
		if _, err := w.Client.StorageV1().CSINodes().Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return fmt.Errorf("updating CSINode %s: %w", w.NodeName, err)
		}
		return nil
	})
}
