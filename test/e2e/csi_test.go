package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/host/mounts"
)

// CSI volumes from a driver of our own (test/csidriver, hostpath-like:
// the Go proxy does not serve csi-driver-host-path), run as a host
// process that registers through the node's plugin registration
// directory as node-driver-registrar would. A static PV of the driver is
// staged and published into a pod, which writes to it; deleting the pod
// unpublishes and unstages it before the pod leaves the API; a second pod
// sees the data; a PV of a driver that never registered waits with
// upstream's FailedMount message. The driver needs no attach
// (CSIDriver attachRequired: false): nothing here runs an external
// attacher.
func TestCSIVolumes(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("csi-volumes")
	ctx := context.Background()
	const driverName = "e2e.csi.podvisor.test"
	d := startTestCSIDriver(t, p, driverName)

	// Registered: the CSINode and the Node's annotation name the driver.
	waitCSINodeDriver(t, p, driverName)
	node, err := p.Admin.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids map[string]string
	if err := json.Unmarshal([]byte(node.Annotations["csi.volume.kubernetes.io/nodeid"]), &ids); err != nil || ids[driverName] != p.NodeName {
		t.Errorf("Node annotation csi.volume.kubernetes.io/nodeid = %q, want it to map %s to %s", node.Annotations["csi.volume.kubernetes.io/nodeid"], driverName, p.NodeName)
	}

	csiDriver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(true),
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}}}
	if _, err := p.Admin.StorageV1().CSIDrivers().Create(ctx, csiDriver, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Admin.StorageV1().CSIDrivers().Delete(context.Background(), driverName, metav1.DeleteOptions{})
	})

	// A static PV of the driver, whose volume (a directory) exists, and
	// one of a driver that never registers.
	volDir := filepath.Join(d.dataDir, "volumes", "vol-1")
	if err := os.MkdirAll(volDir, 0o777); err != nil {
		t.Fatal(err)
	}
	staticClaim(t, p, ns, "csi-data", "csi-e2e-pv", driverName, "vol-1")
	staticClaim(t, p, ns, "csi-missing", "csi-e2e-missing-pv", "missing.csi.podvisor.test", "vol-x")

	mountPath := t.TempDir() // the process runtime's containers share the host's filesystem
	withClaim := func(name, claim, script string) *v1.Pod {
		pod := p.pod(ns, name, v1.RestartPolicyAlways, sh("c", script))
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: mountPath}}
		return pod
	}
	missing := withClaim("missing", "csi-missing", "sleep 3600")
	missing.Spec.NodeName = p.NodeName
	p.create(t, missing)
	writer := p.create(t, withClaim("writer", "csi-data", `echo writer > `+mountPath+`/f; exec sleep 3600`))
	// Deleted before the driver stops (cleanups run last first): a pod
	// whose volume cannot be unpublished stays Terminating.
	t.Cleanup(func() {
		for _, name := range []string{"writer", "reader", "inline", "missing"} {
			_ = p.Admin.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		}
		for _, name := range []string{"writer", "reader", "inline", "missing"} {
			p.waitGone(t, ns, name, 3*time.Minute)
		}
	})

	running := func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning }
	p.waitPod(t, ns, "writer", 3*time.Minute, "Running", running)
	waitLines(t, filepath.Join(volDir, "f"), "writer")
	published := d.waitCall(t, "NodePublishVolume", "vol-1")
	stage := d.waitCall(t, "NodeStageVolume", "vol-1")
	if want := string(writer.UID); published.VolumeContext["csi.storage.k8s.io/pod.uid"] != want {
		t.Errorf("podInfoOnMount: NodePublishVolume's volume context %v lacks pod.uid %s", published.VolumeContext, want)
	}
	if !strings.Contains(published.Target, "/volumes/kubernetes.io~csi/csi-e2e-pv/mount") || published.Staging != stage.Staging {
		t.Errorf("NodePublishVolume target %q staging %q, NodeStageVolume staging %q", published.Target, published.Staging, stage.Staging)
	}
	if !slices.Contains(mounts.Points(), published.Target) {
		t.Errorf("the published volume %s is not mounted", published.Target)
	}

	// requiresRepublish: once the CSIDriver asks for it, the running pod's
	// next resync (at once on a change of the pod: a label) publishes its
	// volume again; then it is turned off for the rest of the test.
	setRepublish := func(on bool) {
		t.Helper()
		cd, err := p.Admin.StorageV1().CSIDrivers().Get(ctx, driverName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cd.Spec.RequiresRepublish = ptr.To(on)
		if _, err := p.Admin.StorageV1().CSIDrivers().Update(ctx, cd, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	publishes := func() int {
		n := 0
		for _, c := range d.calls(t) {
			if c.Method == "NodePublishVolume" && c.VolumeID == "vol-1" {
				n++
			}
		}
		return n
	}
	before := publishes()
	setRepublish(true)
	patch := []byte(`{"metadata":{"labels":{"republish":"yes"}}}`)
	if _, err := p.Admin.CoreV1().Pods(ns).Patch(ctx, "writer", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// 2 min: the label's resync at once, else the periodic one (1 min).
	Eventually(t, 2*time.Minute, "NodePublishVolume of vol-1 again once its driver requires republish", func() (bool, error) {
		return publishes() > before, nil
	})
	setRepublish(false)

	// Deleted, the pod leaves the API only once its volume is unpublished
	// and unstaged (no other pod uses it): while the driver fails
	// NodeUnpublishVolume, the pod stays; once it succeeds (retried), the
	// pod goes.
	if err := os.WriteFile(d.failFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Admin.CoreV1().Pods(ns).Delete(ctx, "writer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	d.waitCall(t, "NodeUnpublishVolume", "vol-1")
	if pod, err := p.Admin.CoreV1().Pods(ns).Get(ctx, "writer", metav1.GetOptions{}); err != nil {
		t.Errorf("the pod left the API while its volume's NodeUnpublishVolume failed: %v", err)
	} else if pod.DeletionTimestamp == nil {
		t.Errorf("pod writer is not being deleted:\n%s", describe(pod))
	}
	if err := os.Remove(d.failFile); err != nil {
		t.Fatal(err)
	}
	p.waitGone(t, ns, "writer", 3*time.Minute)
	calls := d.calls(t)
	if !hasCall(calls, "NodeUnstageVolume", "vol-1") {
		t.Errorf("the pod left the API before its volume was unstaged; driver calls: %+v", calls)
	}
	for _, mp := range []string{published.Target, stage.Staging} {
		if slices.Contains(mounts.Points(), mp) {
			t.Errorf("%s is still mounted after the pod is gone", mp)
		}
	}
	waitLines(t, filepath.Join(volDir, "f"), "writer") // the data stays with the driver

	// A second pod sees the data.
	p.create(t, withClaim("reader", "csi-data", `cat `+mountPath+`/f > `+mountPath+`/seen; exec sleep 3600`))
	p.waitPod(t, ns, "reader", 3*time.Minute, "Running", running)
	waitLines(t, filepath.Join(volDir, "seen"), "writer")

	// The driver reports usage (GET_VOLUME_STATS): the summary API lists
	// the volume under the pod's volume name with its claim and the
	// driver's figures (its used bytes are the sizes of the volume's files).
	wantUsed := fileSizes(t, volDir)
	Eventually(t, 2*time.Minute, "pod reader's CSI volume with the driver's figures in /stats/summary", func() (bool, error) {
		b, err := p.Admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", p.NodeName, "proxy", "stats", "summary").DoRaw(ctx)
		if err != nil {
			return false, err
		}
		var sum statsapi.Summary
		if err := json.Unmarshal(b, &sum); err != nil {
			return false, err
		}
		for _, ps := range sum.Pods {
			if ps.PodRef.Namespace != ns || ps.PodRef.Name != "reader" {
				continue
			}
			for _, vs := range ps.VolumeStats {
				if vs.Name == "data" {
					ok := vs.PVCRef != nil && vs.PVCRef.Name == "csi-data" && ptr.Deref(vs.UsedBytes, 0) == wantUsed && ptr.Deref(vs.CapacityBytes, 0) > 0
					return ok, fmt.Errorf("volume data: pvcRef %+v, used %v (want %d), capacity %v", vs.PVCRef, ptr.Deref(vs.UsedBytes, 0), wantUsed, ptr.Deref(vs.CapacityBytes, 0))
				}
			}
			return false, fmt.Errorf("pod reader's volumes in the summary: %+v", ps.VolumeStats)
		}
		return false, fmt.Errorf("no pod reader in the summary")
	})

	// An inline (ephemeral) volume of the driver: published into its pod
	// only, and gone with it.
	inline := p.pod(ns, "inline", v1.RestartPolicyAlways, sh("c", "echo inline > "+mountPath+"/f; exec sleep 3600"))
	inline.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: driverName}}}}
	inline.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: mountPath}}
	// The process runtime's containers share the host's paths: not where
	// the reader has its volume.
	if p.Runtime != "containerd" {
		mountPath2 := t.TempDir()
		inline.Spec.Containers[0].Command = []string{"sh", "-c", "echo inline > " + mountPath2 + "/f; exec sleep 3600"}
		inline.Spec.Containers[0].VolumeMounts[0].MountPath = mountPath2
	}
	p.create(t, inline)
	p.waitPod(t, ns, "inline", 3*time.Minute, "Running", running)
	var eph csiCall
	Eventually(t, 2*time.Minute, "NodePublishVolume of pod inline's ephemeral volume", func() (bool, error) {
		for _, c := range d.calls(t) {
			if c.Method == "NodePublishVolume" && c.VolumeContext["csi.storage.k8s.io/pod.name"] == "inline" && c.VolumeContext["csi.storage.k8s.io/ephemeral"] == "true" {
				eph = c
				return true, nil
			}
		}
		return false, nil
	})
	if eph.Staging != "" {
		t.Errorf("an inline volume was given a staging path %q", eph.Staging)
	}
	waitLines(t, filepath.Join(d.dataDir, "volumes", eph.VolumeID, "f"), "inline")
	if err := p.Admin.CoreV1().Pods(ns).Delete(ctx, "inline", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitGone(t, ns, "inline", 3*time.Minute)
	if calls := d.calls(t); !hasCall(calls, "NodeUnpublishVolume", eph.VolumeID) || hasCall(calls, "NodeStageVolume", eph.VolumeID) {
		t.Errorf("inline volume %s: want unpublished and never staged; driver calls: %+v", eph.VolumeID, calls)
	}

	// The unregistered driver's pod waited all along with upstream's words.
	Eventually(t, 2*time.Minute, "FailedMount event of pod missing", func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedMount,involvedObject.name=missing"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "driver name missing.csi.podvisor.test not found in the list of registered CSI drivers") {
				return true, nil
			}
		}
		return false, nil
	})
	if pod, err := p.Admin.CoreV1().Pods(ns).Get(ctx, "missing", metav1.GetOptions{}); err != nil || pod.Status.Phase != v1.PodPending {
		t.Errorf("the pod of an unregistered driver's volume is not Pending (err %v):\n%s", err, describe(pod))
	}
}

// A CSI volume whose driver needs attaching (no CSIDriver object says
// otherwise): the embedded attach/detach controller makes its
// VolumeAttachment, as the node is controller-managed; nothing here runs
// an external attacher, so the test marks it attached itself, as one
// would. Until then the pod waits with FailedMount; then the volume is
// staged with the attachment's metadata, the Node reports it in use and
// the controller reports it attached; once the pod is gone the controller
// detaches it (deletes the VolumeAttachment).
func TestCSIVolumeAttach(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("csi-attach")
	ctx := context.Background()
	const driverName = "attach.csi.podvisor.test"
	d := startTestCSIDriver(t, p, driverName)
	waitCSINodeDriver(t, p, driverName)
	volDir := filepath.Join(d.dataDir, "volumes", "vol-2")
	if err := os.MkdirAll(volDir, 0o777); err != nil {
		t.Fatal(err)
	}
	const pvName = "csi-e2e-attach-pv"
	staticClaim(t, p, ns, "attached", pvName, driverName, "vol-2")
	mountPath := t.TempDir()
	pod := p.pod(ns, "user", v1.RestartPolicyAlways, sh("c", "echo user > "+mountPath+"/f; exec sleep 3600"))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "attached"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: mountPath}}
	p.create(t, pod)
	t.Cleanup(func() {
		_ = p.Admin.CoreV1().Pods(ns).Delete(context.Background(), "user", metav1.DeleteOptions{})
		p.waitGone(t, ns, "user", 3*time.Minute)
	})

	var va *storagev1.VolumeAttachment
	Eventually(t, 3*time.Minute, "the attach/detach controller's VolumeAttachment of "+pvName, func() (bool, error) {
		list, err := p.Admin.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i, a := range list.Items {
			if a.Spec.Attacher == driverName && a.Spec.NodeName == p.NodeName && ptr.Deref(a.Spec.Source.PersistentVolumeName, "") == pvName {
				va = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	Eventually(t, 2*time.Minute, "FailedMount of pod user while its volume is not attached", func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedMount,involvedObject.name=user"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "unattached volumes=[data]") && strings.Contains(e.Message, va.Name) {
				return true, nil
			}
		}
		return false, nil
	})
	if hasCall(d.calls(t), "NodeStageVolume", "vol-2") {
		t.Fatal("the volume was staged before it was attached")
	}

	// The external attacher's part: attached, with metadata for the node.
	Eventually(t, time.Minute, "VolumeAttachment "+va.Name+" marked attached", func() (bool, error) {
		cur, err := p.Admin.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cur.Status.Attached = true
		cur.Status.AttachmentMetadata = map[string]string{"attached-by": "e2e"}
		_, err = p.Admin.StorageV1().VolumeAttachments().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err == nil, nil
	})
	p.waitPod(t, ns, "user", 3*time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	waitLines(t, filepath.Join(volDir, "f"), "user")
	if stage := d.waitCall(t, "NodeStageVolume", "vol-2"); stage.PublishContext["attached-by"] != "e2e" {
		t.Errorf("NodeStageVolume's publish context %v is not the attachment's metadata", stage.PublishContext)
	}
	unique := v1.UniqueVolumeName("kubernetes.io/csi/" + driverName + "^vol-2")
	nodeHas := func(what string, has func(*v1.Node) bool, want bool) {
		t.Helper()
		Eventually(t, 3*time.Minute, fmt.Sprintf("Node %s %s %s: %v", p.NodeName, what, unique, want), func() (bool, error) {
			n, err := p.Admin.CoreV1().Nodes().Get(ctx, p.NodeName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return has(n) == want, nil
		})
	}
	inUse := func(n *v1.Node) bool { return slices.Contains(n.Status.VolumesInUse, unique) }
	attached := func(n *v1.Node) bool {
		return slices.ContainsFunc(n.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == unique })
	}
	nodeHas("status.volumesInUse has", inUse, true)
	nodeHas("status.volumesAttached (the controller's) has", attached, true)

	// Gone: unmounted first, then no longer in use, then detached.
	if err := p.Admin.CoreV1().Pods(ns).Delete(ctx, "user", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitGone(t, ns, "user", 3*time.Minute)
	if !hasCall(d.calls(t), "NodeUnstageVolume", "vol-2") {
		t.Error("the pod left the API before its volume was unstaged")
	}
	nodeHas("status.volumesInUse has", inUse, false)
	Eventually(t, 3*time.Minute, "VolumeAttachment "+va.Name+" deleted by the attach/detach controller", func() (bool, error) {
		_, err := p.Admin.StorageV1().VolumeAttachments().Get(ctx, va.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// A restarted agent finds the CSI volumes an earlier one published (the
// vol_data.json records) and its drivers again (the registration sockets):
// the pod keeps running with its volume mounted, and deleting it
// afterwards unpublishes and unstages the volume before it leaves the API.
// (A short name: the data dir is under the test's temporary directory,
// named after it, and a unix socket's path has at most 107 bytes.)
func TestCSIRestart(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ns := p.Namespace("csi-restart")
	ctx := context.Background()
	const driverName = "rs.csi.podvisor.test"
	d := startTestCSIDriver(t, p, driverName)
	waitCSINodeDriver(t, p, driverName)
	if _, err := p.Admin.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	volDir := filepath.Join(d.dataDir, "volumes", "vol-3")
	if err := os.MkdirAll(volDir, 0o777); err != nil {
		t.Fatal(err)
	}
	staticClaim(t, p, ns, "kept", "csi-e2e-restart-pv", driverName, "vol-3")
	mountPath := t.TempDir()
	pod := p.pod(ns, "keeper", v1.RestartPolicyAlways, sh("c", "echo before > "+mountPath+"/f; exec sleep 3600"))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "kept"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: mountPath}}
	p.create(t, pod)
	running := func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "c")
		return pod.Status.Phase == v1.PodRunning && cs != nil && cs.State.Running != nil
	}
	before := p.waitPod(t, ns, "keeper", 3*time.Minute, "Running", running)
	waitLines(t, filepath.Join(volDir, "f"), "before")
	published := d.waitCall(t, "NodePublishVolume", "vol-3")

	p.Stop()
	if code := p.ExitCode(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	p.Start()
	after := p.waitPod(t, ns, "keeper", 3*time.Minute, "Running after the restart", running)
	if a, b := containerStatus(after, "c").ContainerID, containerStatus(before, "c").ContainerID; a != b {
		t.Fatalf("the container was replaced across the restart: %s, was %s", a, b)
	}
	if !slices.Contains(mounts.Points(), published.Target) {
		t.Fatalf("the published volume %s is not mounted after the restart", published.Target)
	}

	if err := p.Admin.CoreV1().Pods(ns).Delete(ctx, "keeper", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitGone(t, ns, "keeper", 3*time.Minute)
	calls := d.calls(t)
	if !hasCall(calls, "NodeUnpublishVolume", "vol-3") || !hasCall(calls, "NodeUnstageVolume", "vol-3") {
		t.Errorf("the restarted agent did not tear the volume down before the pod left the API; driver calls: %+v", calls)
	}
	if slices.Contains(mounts.Points(), published.Target) || slices.Contains(mounts.Points(), published.Staging) {
		t.Errorf("mounts of the deleted pod's volume left: %s, %s", published.Target, published.Staging)
	}
	waitLines(t, filepath.Join(volDir, "f"), "before")
}

// fileSizes is the sum of the sizes of the regular files under dir.
func fileSizes(t *testing.T, dir string) uint64 {
	t.Helper()
	var n uint64
	err := filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		fi, err := e.Info()
		if err == nil {
			n += uint64(fi.Size())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
