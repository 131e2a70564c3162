package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/host/mounts"
	"github.com/podvisor/podvisor/test/images"
)

// Issue 27's point, the node-shutdown seed's non-graceful shutdown with a
// volume, in the lab: a StatefulSet's pod with a CSI volume whose driver
// needs attaching (test/csidriver on each node, the two sharing their
// volumes as nodes share a storage system; the test plays the external
// attacher) runs on node A, whose agent is then killed, as a machine that
// is gone. The pod stays Terminating and the volume attached to A, until
// the out-of-service taint: the controller manager force-deletes the pod
// and detaches the volume from A at once; the replacement runs on B with
// the volume attached there and reads what the first pod wrote. Started
// again, A's agent unpublishes and unstages its stale mounts of the volume
// through its driver; the data stays.
func TestCSINonGracefulShutdown(t *testing.T) {
	needMultiNode(t)
	lab := newNetLab(t, 2)
	cp, _, agents := lab.startCluster(t, "nsd-a", "nsd-b")
	a, b := agents[0], agents[1]
	ctx := context.Background()
	ns := cp.Namespace("nongraceful")

	const driverName = "ngs.csi.podvisor.test"
	storage := t.TempDir()
	dA := startTestCSIDriverOn(t, driverName, a.DataDir, a.Node, storage)
	dB := startTestCSIDriverOn(t, driverName, b.DataDir, b.Node, storage)
	for _, ag := range agents {
		waitCSINodeDriver(t, &Podvisor{t: t, Admin: cp.Admin, NodeName: ag.Node}, driverName)
	}
	if _, err := cp.Admin.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	attacher(t, cp, driverName)
	// Before the drivers stop (clean-ups run last first): the pod's volume
	// is torn down through its driver.
	t.Cleanup(func() {
		_ = cp.Admin.AppsV1().StatefulSets(ns).Delete(context.Background(), "db", metav1.DeleteOptions{})
		cp.waitGone(t, ns, "db-0", 3*time.Minute)
	})
	volDir := filepath.Join(storage, "volumes", "vol-ngs")
	if err := os.MkdirAll(volDir, 0o777); err != nil {
		t.Fatal(err)
	}
	const pvName = "csi-e2e-ngs-pv"
	staticClaim(t, cp, ns, "data-db-0", pvName, driverName, "vol-ngs") // the claim of the StatefulSet's template

	// On A: B is cordoned until the pod runs.
	cordon := func(node string, on bool) {
		t.Helper()
		Eventually(t, time.Minute, fmt.Sprintf("node %s unschedulable=%v", node, on), func() (bool, error) {
			n, err := cp.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			n.Spec.Unschedulable = on
			_, err = cp.Admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err == nil, nil
		})
	}
	cordon(b.Node, true)
	if _, err := cp.Admin.AppsV1().StatefulSets(ns).Create(ctx, dbStatefulSet(ns), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	onNode := func(node string) func(*v1.Pod) bool {
		return func(p *v1.Pod) bool {
			return p.Spec.NodeName == node && p.Status.Phase == v1.PodRunning && p.DeletionTimestamp == nil
		}
	}
	first := cp.waitPod(t, ns, "db-0", 3*time.Minute, "Running on "+a.Node, onNode(a.Node))
	waitLines(t, filepath.Join(volDir, "nodes"), a.Node)
	publishedA := dA.waitCall(t, "NodePublishVolume", "vol-ngs")
	stagedA := dA.waitCall(t, "NodeStageVolume", "vol-ngs")
	cordon(b.Node, false)
	vaA := attachmentOf(t, cp, pvName, a.Node)

	// A is gone: its pod is evicted (tolerating NotReady for 1 s) but stays
	// Terminating, as nothing confirms it, and its volume stays attached.
	a.Kill()
	dA.stop() // a node's driver is gone with it
	Eventually(t, 2*time.Minute, "node "+a.Node+" NotReady", func() (bool, error) {
		n, err := cp.Admin.CoreV1().Nodes().Get(ctx, a.Node, metav1.GetOptions{})
		return err == nil && !nodeReady(n), err
	})
	cp.waitPod(t, ns, "db-0", 2*time.Minute, "Terminating", func(p *v1.Pod) bool { return p.UID == first.UID && p.DeletionTimestamp != nil })
	if _, err := cp.Admin.StorageV1().VolumeAttachments().Get(ctx, vaA, metav1.GetOptions{}); err != nil {
		t.Fatalf("VolumeAttachment %s of the gone node's pod: %v", vaA, err)
	}

	if o, e, code := cp.kubectl(t, "", nil, "taint", "node", a.Node, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"); code != 0 {
		t.Fatalf("kubectl taint: exit %d, stdout %q, stderr %q", code, o, e)
	}
	Eventually(t, 3*time.Minute, "VolumeAttachment "+vaA+" of "+a.Node+" removed", func() (bool, error) {
		list, err := cp.Admin.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(list.Items, func(va storagev1.VolumeAttachment) bool { return va.Name == vaA }), nil
	})
	cp.waitPod(t, ns, "db-0", 3*time.Minute, "replaced and Running on "+b.Node, onNode(b.Node))
	waitLines(t, filepath.Join(volDir, "nodes"), a.Node, b.Node)
	waitLines(t, filepath.Join(volDir, "seen-by-"+b.Node), a.Node, b.Node) // read through B's mount
	if stage := dB.waitCall(t, "NodeStageVolume", "vol-ngs"); stage.PublishContext["node"] != b.Node {
		t.Errorf("NodeStageVolume on %s with publish context %v: want the attachment's to %s", b.Node, stage.PublishContext, b.Node)
	}

	// A returns, and its driver after it (as a DaemonSet's pod would): the
	// stale mounts wait for the driver, which tears them down.
	for _, mp := range []string{publishedA.Target, stagedA.Staging} {
		if !slices.Contains(mounts.Points(), mp) {
			t.Fatalf("%s is not mounted while %s is down: nothing stale to clean up", mp, a.Node)
		}
	}
	lab.Restart(t, a)
	// Its first clean-up ran before it was ready, without the driver: the
	// mounts are left for the driver, not detached behind its back.
	for _, mp := range []string{publishedA.Target, stagedA.Staging} {
		if !slices.Contains(mounts.Points(), mp) {
			t.Errorf("%s unmounted by %s before its driver registered", mp, a.Node)
		}
	}
	dA.start()
	Eventually(t, 3*time.Minute, "the stale mounts of "+a.Node+" gone", func() (bool, error) {
		pts := mounts.Points()
		return !slices.Contains(pts, publishedA.Target) && !slices.Contains(pts, stagedA.Staging), nil
	})
	calls := dA.calls(t)
	if !hasCall(calls, "NodeUnpublishVolume", "vol-ngs") || !hasCall(calls, "NodeUnstageVolume", "vol-ngs") {
		t.Errorf("%s removed its mounts without its driver; driver calls: %+v", a.Node, calls)
	}
	waitLines(t, filepath.Join(volDir, "nodes"), a.Node, b.Node)
	if p, err := cp.Admin.CoreV1().Pods(ns).Get(ctx, "db-0", metav1.GetOptions{}); err != nil || !onNode(b.Node)(p) {
		t.Errorf("after %s returned, db-0 (err %v):\n%s", a.Node, err, describe(p))
	}
}

// dbStatefulSet is a StatefulSet of one pod that appends its node's name
// to the file nodes of its volume and copies what it then reads to
// seen-by-<node>; it leaves a NotReady or unreachable node after 1 s.
func dbStatefulSet(ns string) *appsv1.StatefulSet {
	labels := map[string]string{"app": "db"}
	leave := func(taint string) v1.Toleration {
		return v1.Toleration{Key: taint, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](1)}
	}
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Tolerations:                   []v1.Toleration{leave(v1.TaintNodeUnreachable), leave(v1.TaintNodeNotReady)},
			Containers: []v1.Container{{
				Name: "db", Image: images.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
				Command:      []string{"sh", "-c", `echo $NODE >> /data/nodes && cp /data/nodes /data/seen-by-$NODE && exec sleep 3600`},
				Env:          []v1.EnvVar{{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
				VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
		}},
		VolumeClaimTemplates: []v1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}, StorageClassName: ptr.To(""),
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}}}}},
	}}
}

// attacher plays the external attacher of driverName until the test ends:
// every VolumeAttachment of the driver is marked attached, with
// attachmentMetadata naming its node.
func attacher(t *testing.T, cp *Podvisor, driverName string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		for ctx.Err() == nil {
			list, err := cp.Admin.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
			if err != nil {
				list = &storagev1.VolumeAttachmentList{}
			}
			for i := range list.Items {
				va := &list.Items[i]
				if va.Spec.Attacher != driverName || va.Status.Attached || va.DeletionTimestamp != nil {
					continue
				}
				va.Status.Attached, va.Status.AttachmentMetadata = true, map[string]string{"node": va.Spec.NodeName}
				_, _ = cp.Admin.StorageV1().VolumeAttachments().UpdateStatus(ctx, va, metav1.UpdateOptions{})
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	})
}

// attachmentOf waits for the VolumeAttachment of PV pvName to node and
// returns its name.
func attachmentOf(t *testing.T, cp *Podvisor, pvName, node string) string {
	t.Helper()
	var name string
	Eventually(t, 2*time.Minute, "VolumeAttachment of "+pvName+" to "+node, func() (bool, error) {
		list, err := cp.Admin.StorageV1().VolumeAttachments().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, va := range list.Items {
			if va.Spec.NodeName == node && ptr.Deref(va.Spec.Source.PersistentVolumeName, "") == pvName {
				name = va.Name
				return true, nil
			}
		}
		return false, nil
	})
	return name
}
