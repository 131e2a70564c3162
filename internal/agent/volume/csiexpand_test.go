package volume

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/golang/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
)

func expandCaps() *csi.NodeGetCapabilitiesResponse {
	caps := stageCaps()
	caps.Capabilities = append(caps.Capabilities, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
		Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_EXPAND_VOLUME}}})
	return caps
}

// newExpandFixture is newCSIFixture with pod published: claim ns/data and
// PV pv-1 of 1Gi, a driver that needs no attachment.
func newExpandFixture(t *testing.T, pod *v1.Pod) *csiFixture {
	t.Helper()
	f := newCSIFixture(t, true, []*v1.Pod{pod}, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}})
	ctx := context.Background()
	f.setSizes(t, "1Gi", "1Gi", "", "")
	f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(expandCaps(), nil).AnyTimes()
	f.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csi.NodeStageVolumeResponse{}, nil)
	f.node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
			return &csi.NodePublishVolumeResponse{}, os.MkdirAll(r.TargetPath, 0o750)
		})
	if _, err := f.vm.SetUp(ctx, pod, f.podDir(pod)); err != nil {
		t.Fatal(err)
	}
	return f
}

// setSizes sets the PV's capacity and the claim's status as a resize
// controller leaves them ("" leaves a field out).
func (f *csiFixture) setSizes(t *testing.T, pvCap, claimCap string, resizeStatus v1.ClaimResourceStatus, allocated string) {
	t.Helper()
	ctx := context.Background()
	pv, err := f.client.CoreV1().PersistentVolumes().Get(ctx, "pv-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse(pvCap)}
	if _, err := f.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc, err := f.client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Status.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse(claimCap)}
	pvc.Status.AllocatedResourceStatuses, pvc.Status.AllocatedResources = nil, nil
	pvc.Status.Conditions = nil
	if resizeStatus != "" {
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: resizeStatus}
		pvc.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue}}
	}
	if allocated != "" {
		pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: resource.MustParse(allocated)}
	}
	if _, err := f.client.CoreV1().PersistentVolumeClaims("ns").UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *csiFixture) claim(t *testing.T) *v1.PersistentVolumeClaim {
	t.Helper()
	pvc, err := f.client.CoreV1().PersistentVolumeClaims("ns").Get(context.Background(), "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc
}

// A running pod's claim expanded by the controller (NodeResizePending) is
// grown on the node at the pod's next resync: NodeExpandVolume with the
// pod's volume path, the staging path and the allocated size; the claim's
// capacity follows, its resize status and condition go, and both the pod
// and the claim get FileSystemResizeSuccessful.
func TestCSIClaimExpandedOnlineAtResync(t *testing.T) {
	pod := claimPod("p")
	f := newExpandFixture(t, pod)
	ctx := context.Background()
	f.vm.resync(ctx, pod.UID) // sizes agree: no NodeExpandVolume (gomock fails on one)

	f.setSizes(t, "2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi")
	f.node.EXPECT().NodeExpandVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
			if r.VolumeId != "h1" || r.VolumePath != noderequest.PublishPath(f.podDir(pod), "pv-1") ||
				r.StagingTargetPath != noderequest.StagingPath(f.root, testDriver, "h1") || r.CapacityRange.GetRequiredBytes() != 2<<30 ||
				r.VolumeCapability.GetMount() == nil {
				t.Errorf("NodeExpandVolume %v", r)
			}
			// The claim says the node is at it while it is.
			if s := f.claim(t).Status.AllocatedResourceStatuses[v1.ResourceStorage]; s != v1.PersistentVolumeClaimNodeResizeInProgress {
				t.Errorf("resize status during NodeExpandVolume %q, want NodeResizeInProgress", s)
			}
			return &csi.NodeExpandVolumeResponse{CapacityBytes: 2 << 30}, nil
		})
	f.vm.resync(ctx, pod.UID)
	got := f.claim(t).Status
	if c := got.Capacity[v1.ResourceStorage]; c.Cmp(resource.MustParse("2Gi")) != 0 || got.AllocatedResourceStatuses != nil || len(got.Conditions) != 0 {
		t.Fatalf("claim status after the expansion %+v", got)
	}
	for range 2 {
		if e := f.event(t); e != `Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv-1" n` {
			t.Errorf("event %q", e)
		}
	}
	f.vm.resync(ctx, pod.UID) // done: not again
	if r, err := readRecord(f.podDir(pod), "pv-1"); err != nil || r.Size != "2Gi" {
		t.Errorf("record after the expansion: size %q, %v; want 2Gi", r.Size, err)
	}
}

// A volume grown while this node's pod had it published at the old size
// (a ReadWriteMany volume another node grew, the claim's status already
// done): the node grows its own mount to the PV's size and leaves the
// claim and its events alone, once.
func TestCSIMountOlderThanADoneClaimIsGrown(t *testing.T) {
	pod := claimPod("p")
	f := newExpandFixture(t, pod)
	ctx := context.Background()
	if r, err := readRecord(f.podDir(pod), "pv-1"); err != nil || r.Size != "1Gi" {
		t.Fatalf("record after the publish: size %q, %v; want the PV's 1Gi", r.Size, err)
	}
	f.setSizes(t, "2Gi", "2Gi", "", "")
	before := f.claim(t).ResourceVersion
	f.node.EXPECT().NodeExpandVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
			if r.VolumePath != noderequest.PublishPath(f.podDir(pod), "pv-1") || r.CapacityRange.GetRequiredBytes() != 2<<30 {
				t.Errorf("NodeExpandVolume %v", r)
			}
			return &csi.NodeExpandVolumeResponse{CapacityBytes: 2 << 30}, nil
		}).Times(1)
	f.vm.resync(ctx, pod.UID)
	f.vm.resync(ctx, pod.UID) // the record says 2Gi now: not again
	if rv := f.claim(t).ResourceVersion; rv != before {
		t.Errorf("the claim was written (resource version %s, was %s): %+v", rv, before, f.claim(t).Status)
	}
	select {
	case e := <-f.rec.Events:
		t.Errorf("event %q", e)
	default:
	}
	if r, err := readRecord(f.podDir(pod), "pv-1"); err != nil || r.Size != "2Gi" {
		t.Errorf("record after the expansion: size %q, %v; want 2Gi", r.Size, err)
	}
}

// A size the driver cannot have (OutOfRange) is a VolumeResizeFailed
// event, the claim's NodeResizeError condition and NodeResizeInfeasible,
// after which the node does not try again; a read-only mount is never
// expanded.
func TestCSIClaimExpansionInfeasible(t *testing.T) {
	pod := claimPod("p")
	f := newExpandFixture(t, pod)
	ctx := context.Background()
	f.setSizes(t, "2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi")
	f.node.EXPECT().NodeExpandVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.OutOfRange, "too big")).Times(1)
	f.vm.resync(ctx, pod.UID)
	f.vm.resync(ctx, pod.UID)
	got := f.claim(t).Status
	if got.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInfeasible {
		t.Errorf("resize status %v, want NodeResizeInfeasible", got.AllocatedResourceStatuses)
	}
	var found bool
	for _, c := range got.Conditions {
		found = found || c.Type == v1.PersistentVolumeClaimNodeResizeError && strings.Contains(c.Message, "too big")
	}
	if !found {
		t.Errorf("no NodeResizeError condition naming the error: %+v", got.Conditions)
	}
	if e := f.event(t); !strings.HasPrefix(e, `Warning VolumeResizeFailed NodeExpandVolume.NodeExpandVolume failed for volume "pv-1" : `) || !strings.Contains(e, "too big") {
		t.Errorf("event %q", e)
	}

	ro := claimPod("ro")
	ro.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly = true
	f = newExpandFixture(t, ro)
	f.setSizes(t, "2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi")
	f.vm.resync(ctx, ro.UID) // no NodeExpandVolume
	if s := f.claim(t).Status.AllocatedResourceStatuses[v1.ResourceStorage]; s != v1.PersistentVolumeClaimNodeResizePending {
		t.Errorf("a read-only mount's claim changed to %q", s)
	}
}

// A driver that cannot grow a volume while it is mounted (FailedPrecondition)
// gets one NodeExpandVolume per pod, as the kubelet marks the mounted
// volume and expands it at its next mount: a NodeResizeError condition and
// a VolumeResizeFailed event, then nothing more for this pod, not even at a
// container restart (the mark is the pod's: another pod's mount tries again).
func TestCSIExpansionInUseIsNotRetriedWhileMounted(t *testing.T) {
	pod := claimPod("p")
	f := newExpandFixture(t, pod)
	ctx := context.Background()
	f.setSizes(t, "2Gi", "1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi")
	f.node.EXPECT().NodeExpandVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.FailedPrecondition, "volume in use")).Times(1)
	f.vm.resync(ctx, pod.UID)
	f.vm.resync(ctx, pod.UID)
	if _, err := f.vm.SetUp(ctx, pod, f.podDir(pod)); err != nil { // a container restart
		t.Fatal(err)
	}
	var found bool
	for _, c := range f.claim(t).Status.Conditions {
		found = found || c.Type == v1.PersistentVolumeClaimNodeResizeError && strings.Contains(c.Message, "volume in use")
	}
	if !found {
		t.Errorf("no NodeResizeError condition naming the error: %+v", f.claim(t).Status.Conditions)
	}
	if e := f.event(t); !strings.HasPrefix(e, `Warning VolumeResizeFailed `) || !strings.Contains(e, "volume in use") {
		t.Errorf("event %q", e)
	}
	select {
	case e := <-f.rec.Events:
		t.Errorf("a second event %q", e)
	default:
	}
	if s := f.claim(t).Status.AllocatedResourceStatuses[v1.ResourceStorage]; s == v1.PersistentVolumeClaimNodeResizeInfeasible {
		t.Errorf("resize status %q: an in-use refusal is not infeasible", s)
	}
}
