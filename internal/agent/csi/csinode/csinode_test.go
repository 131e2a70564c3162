package csinode

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func node() *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}
}

func get(t *testing.T, c *fake.Clientset) *storagev1.CSINode {
	t.Helper()
	got, err := c.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func updates(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "csinodes" {
			n++
		}
	}
	return n
}

func TestInstallCreatesTheCSINodeOwnedByTheNode(t *testing.T) {
	c := fake.NewClientset(node())
	w := Writer{Client: c, NodeName: "n1"}
	ctx := context.Background()
	d := Driver("hostpath.csi.k8s.io", "n1", 10, map[string]string{"topology.hostpath.csi/node": "n1"})
	if err := w.Install(ctx, d); err != nil {
		t.Fatal(err)
	}
	got := get(t, c)
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "uid-n1"}}
	if dff := cmp.Diff(want, got.OwnerReferences); dff != "" {
		t.Fatalf("owner (-want +got):\n%s", dff)
	}
	if dff := cmp.Diff([]storagev1.CSINodeDriver{d}, got.Spec.Drivers); dff != "" {
		t.Fatalf("drivers (-want +got):\n%s", dff)
	}

	// Registering the same driver again (a restarted registrar) writes nothing.
	before := updates(c)
	if err := w.Install(ctx, d); err != nil {
		t.Fatal(err)
	}
	if updates(c) != before {
		t.Fatal("an unchanged driver was written again")
	}

	if err := w.Uninstall(ctx, "hostpath.csi.k8s.io"); err != nil {
		t.Fatal(err)
	}
	if got := get(t, c); len(got.Spec.Drivers) != 0 {
		t.Fatalf("driver left after Uninstall: %v", got.Spec.Drivers)
	}
}

func TestInstallKeepsOtherDrivers(t *testing.T) {
	other := Driver("other.example.com", "x", 0, nil)
	existing := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{other}}}
	c := fake.NewClientset(node(), existing)
	d := Driver("d", "n1", 0, nil)
	if err := (Writer{Client: c, NodeName: "n1"}).Install(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if dff := cmp.Diff([]storagev1.CSINodeDriver{other, d}, get(t, c).Spec.Drivers); dff != "" {
		t.Fatalf("drivers (-want +got):\n%s", dff)
	}
}

func TestInstallRetriesOnConflict(t *testing.T) {
	c := fake.NewClientset(node(), &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	conflicts := 2
	c.PrependReactor("update", "csinodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "storage.k8s.io", Resource: "csinodes"}, "n1", nil)
		}
		return false, nil, nil
	})
	if err := (Writer{Client: c, NodeName: "n1"}).Install(context.Background(), Driver("d", "n1", 0, nil)); err != nil {
		t.Fatal(err)
	}
	if conflicts != 0 || len(get(t, c).Spec.Drivers) != 1 {
		t.Fatalf("conflicts left %d, drivers %v", conflicts, get(t, c).Spec.Drivers)
	}
}

func TestUninstallWithoutCSINodeCreatesNothing(t *testing.T) {
	c := fake.NewClientset(node())
	if err := (Writer{Client: c, NodeName: "n1"}).Uninstall(context.Background(), "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("CSINode exists after Uninstall on nothing: %v", err)
	}
}

func TestInstallWithoutNodeFails(t *testing.T) {
	c := fake.NewClientset()
	if err := (Writer{Client: c, NodeName: "n1"}).Install(context.Background(), Driver("d", "n1", 0, nil)); err == nil {
		t.Fatal("installed a driver for a node that does not exist")
	}
}
