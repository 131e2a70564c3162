package volume

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/golang/mock/gomock"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/csi/csitest"
	"github.com/podvisor/podvisor/internal/agent/csi/drivers"
	"github.com/podvisor/podvisor/internal/agent/csi/nodeclient"
	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
	"github.com/podvisor/podvisor/internal/agent/volume/csivolume"
)

const testDriver = "d.csi.test"

// csiDrivers is a registry of one mock driver (or none).
type csiDrivers map[string]*nodeclient.Client

func (d csiDrivers) Get(name string) (drivers.Driver, *nodeclient.Client, bool) {
	c, ok := d[name]
	return drivers.Driver{Name: name}, c, ok
}

type csiFixture struct {
	vm      *Manager
	client  *fake.Clientset
	rec     *record.FakeRecorder
	node    *driver.MockNodeServer
	podsDir string
	root    string
}

// newCSIFixture is a manager over a fake API holding a CSI PV pv-1 of
// testDriver (handle h1) bound to claim ns/data, and the pods, with the
// mock driver registered when registered.
func newCSIFixture(t *testing.T, registered bool, pods []*v1.Pod, objects ...k8sruntime.Object) *csiFixture {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data", UID: "claim-uid"},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-1"}, Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}, Spec: v1.PersistentVolumeSpec{
		AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		ClaimRef:    &v1.ObjectReference{Namespace: "ns", Name: "data", UID: "claim-uid"},
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
			Driver: testDriver, VolumeHandle: "h1", VolumeAttributes: map[string]string{"k": "v"}}},
	}}
	f := &csiFixture{client: fake.NewClientset(append(objects, pvc, pv)...), rec: record.NewFakeRecorder(100),
		podsDir: t.TempDir(), root: t.TempDir()}
	reg := csiDrivers{}
	if registered {
		sock := filepath.Join(t.TempDir(), "csi.sock")
		f.node = csitest.Driver(t, sock)
		c, err := nodeclient.Dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		reg[testDriver] = c
	}
	fp := &fakePods{pods: map[types.UID]*v1.Pod{}}
	for _, p := range pods {
		fp.pods[p.UID] = p
	}
	vm, err := New(Config{NodeName: "n", PodsDir: f.podsDir, Client: f.client, Objects: clientObjects{f.client},
		Pods: fp, Recorder: f.rec, CSI: reg, CSIRoot: f.root})
	if err != nil {
		t.Fatal(err)
	}
	f.vm = vm
	return f
}

func claimPod(name string) *v1.Pod {
	p := testPod(name)
	p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	return p
}

func (f *csiFixture) podDir(p *v1.Pod) string {
	return filepath.Join(f.podsDir, "ns_"+p.Name+"_"+string(p.UID))
}

func (f *csiFixture) event(t *testing.T) string {
	t.Helper()
	select {
	case e := <-f.rec.Events:
		return e
	default:
		t.Fatal("no event recorded")
		return ""
	}
}

func stageCaps() *csi.NodeGetCapabilitiesResponse {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{Type: &csi.NodeServiceCapability_Rpc{
		Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}}}}
}

func TestCSIVolumeOfAnUnregisteredDriverWaits(t *testing.T) {
	pod := claimPod("p")
	f := newCSIFixture(t, false, []*v1.Pod{pod})
	if _, err := f.vm.SetUp(context.Background(), pod, f.podDir(pod)); err == nil {
		t.Fatal("SetUp succeeded without the driver")
	}
	want := `Warning FailedMount MountVolume.MountDevice failed for volume "pv-1" : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name d.csi.test not found in the list of registered CSI drivers`
	if got := f.event(t); got != want {
		t.Fatalf("event %q\nwant  %q", got, want)
	}
}

// Without a CSIDriver object the volume must be attached: the pod waits
// for its VolumeAttachment, then the volume is staged with the
// attachment's metadata and published, once however often SetUp runs.
func TestCSIVolumeWaitsForItsAttachmentThenStagesAndPublishesOnce(t *testing.T) {
	pod := claimPod("p")
	gid := int64(3000)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: &gid}
	f := newCSIFixture(t, true, []*v1.Pod{pod})
	ctx := context.Background()
	if _, err := f.vm.SetUp(ctx, pod, f.podDir(pod)); err == nil {
		t.Fatal("SetUp succeeded before the volume was attached")
	}
	if got := f.event(t); !strings.Contains(got, "unattached volumes=[data]") || !strings.Contains(got, "volume attachment csi-") {
		t.Fatalf("event %q does not say the volume is not attached", got)
	}

	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: csivolume.AttachmentName("h1", testDriver, "n")},
		Status: storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: map[string]string{"dev": "/dev/x"}}}
	if _, err := f.client.StorageV1().VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	staging := noderequest.StagingPath(f.root, testDriver, "h1")
	target := noderequest.PublishPath(f.podDir(pod), "pv-1")
	gomock.InOrder(
		f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(stageCaps(), nil),
		f.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(_ context.Context, r *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
				if r.StagingTargetPath != staging || r.PublishContext["dev"] != "/dev/x" {
					t.Errorf("NodeStageVolume %v", r)
				}
				return &csi.NodeStageVolumeResponse{}, nil
			}),
		f.node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
				if r.TargetPath != target || r.StagingTargetPath != staging || r.VolumeContext["k"] != "v" {
					t.Errorf("NodePublishVolume %v", r)
				}
				if _, ok := r.VolumeContext["csi.storage.k8s.io/pod.name"]; ok {
					t.Errorf("pod info sent to a driver without podInfoOnMount: %v", r.VolumeContext)
				}
				return &csi.NodePublishVolumeResponse{}, os.Mkdir(r.TargetPath, 0o750)
			}),
	)
	for range 2 {
		paths, err := f.vm.SetUp(ctx, pod, f.podDir(pod))
		if err != nil {
			t.Fatal(err)
		}
		if paths["data"] != target {
			t.Fatalf("volume at %q, want %q", paths["data"], target)
		}
	}
	b, err := os.ReadFile(noderequest.RecordPath(f.podDir(pod), "pv-1"))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := csivolume.Decode(b); err != nil || !r.Staged || r.AttachmentID != va.Name {
		t.Fatalf("record %+v, %v", r, err)
	}
}

// Two pods publish one volume: the first one's unmount only unpublishes,
// the last one's unstages too; an unmount with nothing left calls nothing.
func TestCSIVolumeIsUnstagedWhenItsLastPodGoes(t *testing.T) {
	a, b := claimPod("a"), claimPod("b")
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(true)}}
	f := newCSIFixture(t, true, []*v1.Pod{a, b}, driverObj)
	ctx := context.Background()
	f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(stageCaps(), nil).Times(2)
	f.node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).Return(&csi.NodeStageVolumeResponse{}, nil).Times(2)
	f.node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
			if r.VolumeContext["csi.storage.k8s.io/pod.namespace"] != "ns" {
				t.Errorf("podInfoOnMount: volume context %v", r.VolumeContext)
			}
			return &csi.NodePublishVolumeResponse{}, os.Mkdir(r.TargetPath, 0o750)
		}).Times(2)
	for _, p := range []*v1.Pod{a, b} {
		if _, err := f.vm.SetUp(ctx, p, f.podDir(p)); err != nil {
			t.Fatal(err)
		}
	}

	f.node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csi.NodeUnpublishVolumeResponse{}, nil)
	want := []v1.UniqueVolumeName{"kubernetes.io/csi/d.csi.test^h1"}
	if got := InUse(f.podsDir); !slices.Equal(got, want) {
		t.Fatalf("InUse = %v, want %v (once for two pods)", got, want)
	}
	if err := f.vm.Unmount(ctx, f.podDir(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(noderequest.PublishPath(f.podDir(a), "pv-1"))); !os.IsNotExist(err) {
		t.Fatalf("pod a's volume directory left: %v", err)
	}
	gomock.InOrder(
		f.node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csi.NodeUnpublishVolumeResponse{}, nil),
		f.node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(&csi.NodeUnstageVolumeResponse{}, nil),
	)
	if err := f.vm.Unmount(ctx, f.podDir(b)); err != nil {
		t.Fatal(err)
	}
	if err := f.vm.Unmount(ctx, f.podDir(b)); err != nil {
		t.Fatalf("second unmount: %v", err)
	}
	if got := InUse(f.podsDir); len(got) != 0 {
		t.Fatalf("InUse = %v after every pod unmounted", got)
	}
}

// An inline CSI volume is published (never staged, even by a driver that
// stages) with the pod's info marked ephemeral, and only unpublished.
func TestInlineCSIVolumeIsPublishedOnly(t *testing.T) {
	pod := testPod("p")
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: testDriver, VolumeAttributes: map[string]string{"size": "1"}}}}}
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}, Spec: storagev1.CSIDriverSpec{
		PodInfoOnMount: ptr.To(true), VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral}}}
	f := newCSIFixture(t, true, []*v1.Pod{pod}, driverObj)
	ctx := context.Background()
	handle := noderequest.InlineHandle(string(pod.UID), "scratch")
	gomock.InOrder(
		f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(stageCaps(), nil),
		f.node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
				if r.VolumeId != handle || r.StagingTargetPath != "" || r.VolumeContext["csi.storage.k8s.io/ephemeral"] != "true" || r.VolumeContext["size"] != "1" {
					t.Errorf("NodePublishVolume %v", r)
				}
				return &csi.NodePublishVolumeResponse{}, os.Mkdir(r.TargetPath, 0o750)
			}),
		f.node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csi.NodeUnpublishVolumeResponse{}, nil),
	)
	paths, err := f.vm.SetUp(ctx, pod, f.podDir(pod))
	if err != nil {
		t.Fatal(err)
	}
	if want := noderequest.PublishPath(f.podDir(pod), "scratch"); paths["scratch"] != want {
		t.Fatalf("volume at %q, want %q", paths["scratch"], want)
	}
	if got := InUse(f.podsDir); len(got) != 0 {
		t.Fatalf("an inline volume is reported in use (it is never attached): %v", got)
	}
	if err := f.vm.Unmount(ctx, f.podDir(pod)); err != nil {
		t.Fatal(err)
	}
}

func TestInlineCSIVolumeOfADriverWithoutEphemeralModeWaits(t *testing.T) {
	pod := testPod("p")
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: testDriver}}}}
	f := newCSIFixture(t, true, []*v1.Pod{pod})
	if _, err := f.vm.SetUp(context.Background(), pod, f.podDir(pod)); err == nil {
		t.Fatal("SetUp succeeded")
	}
	want := `Warning FailedMount MountVolume.SetUp failed for volume "scratch" : volume mode "Ephemeral" not supported by driver d.csi.test (no CSIDriver object)`
	if got := f.event(t); got != want {
		t.Fatalf("event %q\nwant  %q", got, want)
	}
}

// A driver with tokenRequests gets the pod's tokens, by audience, in the
// publish request's volume context.
func TestCSIVolumeGetsThePodsTokens(t *testing.T) {
	pod := claimPod("p")
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: ptr.To(false), TokenRequests: []storagev1.TokenRequest{{Audience: "vault"}}}}
	f := newCSIFixture(t, true, []*v1.Pod{pod}, driverObj)
	f.client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		ca := a.(k8stesting.CreateAction)
		tr := ca.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		if ca.GetSubresource() != "token" || len(tr.Spec.Audiences) != 1 || tr.Spec.BoundObjectRef.UID != pod.UID {
			return true, nil, fmt.Errorf("unexpected token request %v", tr)
		}
		tr.Status.Token = "tok-for-" + tr.Spec.Audiences[0]
		return true, tr, nil
	})
	f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(&csi.NodeGetCapabilitiesResponse{}, nil)
	f.node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
			if got := r.VolumeContext[csivolume.TokensKey]; !strings.Contains(got, `"vault":{"token":"tok-for-vault"`) {
				t.Errorf("volume context %s = %q", csivolume.TokensKey, got)
			}
			return &csi.NodePublishVolumeResponse{}, nil
		})
	if _, err := f.vm.SetUp(context.Background(), pod, f.podDir(pod)); err != nil {
		t.Fatal(err)
	}
}

// A driver with requiresRepublish gets NodePublishVolume again at each
// resync of the running pod, with the pod's tokens, as the kubelet remounts
// such volumes at each pod sync; a failure is a FailedMount event and the
// next resync tries again. A driver without it is published once (the
// other tests' resyncs: gomock fails on a second publish).
func TestCSIVolumeOfARequiresRepublishDriverIsPublishedAgain(t *testing.T) {
	pod := claimPod("p")
	driverObj := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}, Spec: storagev1.CSIDriverSpec{
		AttachRequired: ptr.To(false), RequiresRepublish: ptr.To(true), TokenRequests: []storagev1.TokenRequest{{Audience: "vault"}}}}
	f := newCSIFixture(t, true, []*v1.Pod{pod}, driverObj)
	f.client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		tr.Status.Token = "tok"
		return true, tr, nil
	})
	f.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(&csi.NodeGetCapabilitiesResponse{}, nil).AnyTimes()
	var publishes int
	fail := false
	f.node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
			publishes++
			if !strings.Contains(r.VolumeContext[csivolume.TokensKey], `"vault":{"token":"tok"`) {
				t.Errorf("publish %d without the pod's token: %v", publishes, r.VolumeContext)
			}
			if fail {
				return nil, status.Error(codes.Internal, "driver trouble")
			}
			return &csi.NodePublishVolumeResponse{}, os.MkdirAll(r.TargetPath, 0o750)
		}).Times(4)
	ctx := context.Background()
	if _, err := f.vm.SetUp(ctx, pod, f.podDir(pod)); err != nil {
		t.Fatal(err)
	}
	f.vm.resync(ctx, pod.UID)
	if publishes != 2 {
		t.Fatalf("%d publishes after a resync, want 2", publishes)
	}
	fail = true
	f.vm.resync(ctx, pod.UID)
	if e := f.event(t); !strings.HasPrefix(e, "Warning FailedMount ") || !strings.Contains(e, "driver trouble") {
		t.Errorf("event %q", e)
	}
	fail = false
	f.vm.resync(ctx, pod.UID) // still published: tried again
	if publishes != 4 {
		t.Errorf("%d publishes, want 4", publishes)
	}
}

// A pod gone while the node was down left its CSI volume published: its
// directory stays, volume and all, until the driver registers (a node that
// comes back runs its driver's pod after the agent), then the sweep has
// the driver unpublish and unstage it and removes the directory. Detaching
// it by path would leave the volume staged and the driver never told.
func TestCSIVolumeOfAGonePodWaitsForItsDriver(t *testing.T) {
	gone := claimPod("gone")
	f := newCSIFixture(t, true, nil)
	reg := f.vm.cfg.CSI.(csiDrivers)
	client := reg[testDriver]
	delete(reg, testDriver) // not registered yet
	dir := f.podDir(gone)
	if err := writeRecord(dir, csivolume.Record{SpecVolID: "pv-1", VolumeHandle: "h1", DriverName: testDriver, NodeName: "n",
		Staged: true, VolumeLifecycleMode: storagev1.VolumeLifecyclePersistent, PodVolume: "data"}); err != nil {
		t.Fatal(err)
	}
	target := noderequest.PublishPath(dir, "pv-1")
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(target, "data") // the volume's, as if mounted there
	if err := os.WriteFile(data, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if f.vm.TearDown(dir) {
		t.Fatal("TearDown let the directory go while its CSI volume's driver is not registered")
	}
	f.vm.sweep()
	if _, err := os.Stat(data); err != nil {
		t.Fatalf("the volume's data went before its driver unpublished it: %v", err)
	}

	reg[testDriver] = client
	gomock.InOrder(
		f.node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(_ context.Context, r *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
				if r.TargetPath != target {
					t.Errorf("NodeUnpublishVolume %v", r)
				}
				return &csi.NodeUnpublishVolumeResponse{}, os.RemoveAll(r.TargetPath) // the driver unmounts
			}),
		f.node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).Return(&csi.NodeUnstageVolumeResponse{}, nil),
	)
	f.vm.sweep()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the gone pod's directory is left once its driver unpublished its volume: %v", err)
	}
}
