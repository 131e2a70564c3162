package drivers

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/golang/mock/gomock"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/csi/csinode"
	"github.com/podvisor/podvisor/internal/agent/csi/csitest"
	"github.com/podvisor/podvisor/internal/agent/csi/registration"
)

const driverName = "mock.csi.example.com"

// mockDriver serves csi-test's mock driver on a unix socket; NodeGetInfo
// answers as a driver on node n1 in zone z1 with a limit of 12 volumes.
func mockDriver(t *testing.T, dir string) (endpoint string) {
	t.Helper()
	endpoint = filepath.Join(dir, "csi.sock")
	csitest.Driver(t, endpoint).EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csi.NodeGetInfoResponse{
		NodeId: "n1-in-driver", MaxVolumesPerNode: 12,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{"topology.mock.csi/zone": "z1"}},
	}, nil).AnyTimes()
	return endpoint
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func csiNode(t *testing.T, c *fake.Clientset) *storagev1.CSINode {
	t.Helper()
	n, err := c.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The whole node side of registration: a registrar socket appears in
// plugins_registry, the watcher registers the driver it names, the driver's
// node info lands in the CSINode, the registrar hears of it, and the
// registry hands out a working client; the socket going away undoes it.
func TestRegistrarSocketToCSINode(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}})
	reg := &Registry{CSINode: csinode.Writer{Client: c, NodeName: "n1"}, CallTimeout: time.Minute, Log: discard()}
	t.Cleanup(reg.Close)

	endpoint := mockDriver(t, t.TempDir())
	regDir := filepath.Join(t.TempDir(), registration.DirName)
	if err := os.MkdirAll(regDir, 0o750); err != nil {
		t.Fatal(err)
	}
	w := &registration.Watcher{Dir: regDir, Handler: reg, Clock: clocktesting.NewFakeClock(time.Now()),
		Interval: time.Second, CallTimeout: time.Minute, Log: discard()}

	r := &csitest.Registrar{Info: regapi.PluginInfo{
		Type: regapi.CSIPlugin, Name: driverName, Endpoint: endpoint, SupportedVersions: []string{"1.0.0"}}}
	stop := r.Serve(t, filepath.Join(regDir, driverName+"-reg.sock"))

	w.Sync(ctx)
	if s := r.Told(); len(s) != 1 || !s[0].PluginRegistered {
		t.Fatalf("registrar was told %v, want one success", s)
	}
	want := []storagev1.CSINodeDriver{{Name: driverName, NodeID: "n1-in-driver",
		TopologyKeys: []string{"topology.mock.csi/zone"}, Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](12)}}}
	if d := cmp.Diff(want, csiNode(t, c).Spec.Drivers); d != "" {
		t.Fatalf("CSINode drivers (-want +got):\n%s", d)
	}
	got, client, ok := reg.Get(driverName)
	if !ok || got.Endpoint != endpoint || got.Node.NodeID != "n1-in-driver" {
		t.Fatalf("Get = %+v, %v", got, ok)
	}
	// The client the registry keeps reaches the driver.
	callCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if info, err := client.NodeGetInfo(callCtx); err != nil || info.NodeID != "n1-in-driver" {
		t.Fatalf("registry's client: %+v, %v", info, err)
	}

	// The registrar exits and its socket is removed: the driver goes.
	stop()
	w.Sync(ctx)
	if _, _, ok := reg.Get(driverName); ok {
		t.Fatal("driver still registered after its socket went away")
	}
	if d := csiNode(t, c).Spec.Drivers; len(d) != 0 {
		t.Fatalf("CSINode still lists %v", d)
	}
}

func TestRegisterFailsForADriverThatDoesNotAnswer(t *testing.T) {
	c := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	reg := &Registry{CSINode: csinode.Writer{Client: c, NodeName: "n1"}, CallTimeout: 2 * time.Second, Log: discard()}
	err := reg.Register(context.Background(), registration.Plugin{Name: driverName, Endpoint: filepath.Join(t.TempDir(), "absent.sock"), Versions: []string{"1.0.0"}})
	if err == nil {
		t.Fatal("a driver with no socket was registered")
	}
	if _, _, ok := reg.Get(driverName); ok {
		t.Fatal("failed driver is in the registry")
	}
	if _, err := c.StorageV1().CSINodes().Get(context.Background(), "n1", metav1.GetOptions{}); err == nil {
		if d := csiNode(t, c).Spec.Drivers; len(d) != 0 {
			t.Fatalf("failed driver written to CSINode: %v", d)
		}
	}
}
