package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/host/mounts"
)

// testCSIOnlineExpansion grows a claim mounted by a running pod, as a user
// does with kubectl edit: the upstream external-resizer (beside the test
// driver d, which TestCSIDynamicProvisioning runs with the
// external-provisioner) calls ControllerExpandVolume and leaves the claim
// NodeResizePending; the node calls NodeExpandVolume for the pod's volume
// and marks the claim expanded, and df in the pod shows the new size of the
// volume's filesystem (a tmpfs the driver remounts larger).
func testCSIOnlineExpansion(t *testing.T, p *Podvisor, d *testCSIDriver, ns, driverName string) {
	ctx := context.Background()
	start := time.Now()
	defer func() { t.Logf("online expansion: %v", time.Since(start).Round(time.Millisecond)) }()
	runSidecar(t, p, d, buildSidecar(t, resizerModule, "./cmd/csi-resizer"))
	// A failed test leaves no tmpfs mounted in its temporary directory.
	t.Cleanup(func() { mounts.UnmountUnder(d.dataDir, mounts.Points()) })

	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-e2e-expand"}, Provisioner: driverName,
		Parameters:           map[string]string{"fs": "tmpfs"},
		AllowVolumeExpansion: ptr.To(true),
		ReclaimPolicy:        ptr.To(v1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	if _, err := p.Admin.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Admin.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
	})
	claims := p.Admin.CoreV1().PersistentVolumeClaims(ns)
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "grows"}, Spec: v1.PersistentVolumeClaimSpec{
		StorageClassName: ptr.To(sc.Name), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("16Mi")}}}}
	if _, err := claims.Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var handle string
	Eventually(t, 3*time.Minute, "claim grows bound", func() (bool, error) {
		c, err := claims.Get(ctx, "grows", metav1.GetOptions{})
		if err != nil || c.Status.Phase != v1.ClaimBound {
			return false, err
		}
		pv, err := p.Admin.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		if err == nil {
			handle = pv.Spec.CSI.VolumeHandle
		}
		return err == nil, err
	})
	pod := p.pod(ns, "grower", v1.RestartPolicyAlways, sh("c", "exec sleep 3600"))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "grows"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/grows"}}
	created := p.create(t, pod)
	p.waitPod(t, ns, "grower", 3*time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	if got := podDFKiB(t, p, ns, "grower", "/grows"); got != 16*1024 {
		t.Fatalf("df in the pod: a new 16Mi volume has %d KiB", got)
	}

	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"32Mi"}}}}`)
	if _, err := claims.Patch(ctx, "grows", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The resizer's part: the PV is 32Mi, the claim waits for the node.
	Eventually(t, 2*time.Minute, "the resizer to expand the volume and leave the claim to the node", func() (bool, error) {
		c, err := claims.Get(ctx, "grows", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		// The node may be quicker than this poll.
		if c.Status.Capacity.Storage().Cmp(resource.MustParse("32Mi")) == 0 {
			return true, nil
		}
		return c.Status.AllocatedResourceStatuses[v1.ResourceStorage] == v1.PersistentVolumeClaimNodeResizePending,
			fmt.Errorf("status %+v", c.Status)
	})
	// A change of the pod makes the node look now rather than at its next
	// resync, a minute at most, as the kubelet's pod sync.
	if _, err := p.Admin.CoreV1().Pods(ns).Patch(ctx, "grower", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"e2e/look":"now"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 2*time.Minute, "the node to finish the expansion of claim grows", func() (bool, error) {
		c, err := claims.Get(ctx, "grows", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pending := slices.ContainsFunc(c.Status.Conditions, func(c v1.PersistentVolumeClaimCondition) bool {
			return c.Type == v1.PersistentVolumeClaimFileSystemResizePending
		})
		return c.Status.Capacity.Storage().Cmp(resource.MustParse("32Mi")) == 0 && c.Status.AllocatedResourceStatuses == nil && !pending,
			fmt.Errorf("status %+v", c.Status)
	})
	call := d.waitCall(t, "NodeExpandVolume", handle)
	podDir := filepath.Join(p.DataDir, "agent", "pods", ns+"_grower_"+string(created.UID))
	if call.Capacity != 32<<20 || !strings.HasPrefix(call.Target, podDir+"/volumes/kubernetes.io~csi/") || !strings.HasSuffix(call.Target, "/mount") ||
		!strings.HasSuffix(call.Staging, "/globalmount") {
		t.Errorf("NodeExpandVolume %+v: want 32Mi for the pod's volume path under %s and the staging path", call, podDir)
	}
	if got := podDFKiB(t, p, ns, "grower", "/grows"); got != 32*1024 {
		t.Errorf("df in the pod after the expansion: %d KiB, want 32Mi", got)
	}
	Eventually(t, time.Minute, "FileSystemResizeSuccessful on the claim", func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=PersistentVolumeClaim,involvedObject.name=grows"})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e v1.Event) bool { return e.Reason == "FileSystemResizeSuccessful" }), nil
	})

	if err := p.Admin.CoreV1().Pods(ns).Delete(ctx, "grower", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitGone(t, ns, "grower", 3*time.Minute)
	if err := claims.Delete(ctx, "grows", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 3*time.Minute, "the grown volume deleted", func() (bool, error) {
		_, err := os.Stat(filepath.Join(d.dataDir, "volumes", handle))
		return os.IsNotExist(err), nil
	})
}

// podDFKiB is the size in KiB of the filesystem at path in the pod, as df
// in its container says.
func podDFKiB(t *testing.T, p *Podvisor, ns, pod, path string) int64 {
	t.Helper()
	out, errOut, code := p.kubectl(t, "", nil, "exec", "-n", ns, pod, "--", "df", "-k", path)
	if code != 0 {
		t.Fatalf("df -k %s in %s: exit %d: %s", path, pod, code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	if len(fields) < 2 {
		t.Fatalf("df -k %s: %q", path, out)
	}
	n, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		t.Fatalf("df -k %s: %q", path, out)
	}
	return n
}
