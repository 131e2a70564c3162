package nodeclient

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/golang/mock/gomock"
	"github.com/google/go-cmp/cmp"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/agent/csi/csitest"
	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
)

// mockDriver serves csi-test's mock driver on a unix socket in a temporary
// directory, as a driver would, and returns its node server to set
// expectations on and a client dialled to it.
func mockDriver(t *testing.T) (*driver.MockNodeServer, *Client) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "csi.sock")
	node := csitest.Driver(t, sock)
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return node, c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func rpcCap(ty csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
	return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: ty}}}
}

func TestNodeGetInfo(t *testing.T) {
	node, c := mockDriver(t)
	node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csi.NodeGetInfoResponse{
		NodeId: "node-a", MaxVolumesPerNode: 16,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{"topology.example.com/zone": "z1"}},
	}, nil)
	got, err := c.NodeGetInfo(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := NodeInfo{NodeID: "node-a", MaxVolumes: 16, Topology: map[string]string{"topology.example.com/zone": "z1"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("NodeGetInfo (-want +got):\n%s", d)
	}
}

func TestNodeGetInfoRefusesAnEmptyNodeID(t *testing.T) {
	node, c := mockDriver(t)
	node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csi.NodeGetInfoResponse{}, nil)
	if _, err := c.NodeGetInfo(ctx(t)); err == nil {
		t.Fatal("an empty node ID was accepted")
	}
}

func pv() *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: "mock.example.com", VolumeHandle: "vol/1", FSType: "ext4"}},
		},
	}
}

// A staging driver sees stage, publish, unpublish, unstage with the paths
// the kubelet uses, and the directories appear and go as the kubelet's do.
func TestStagingDriverLifecycle(t *testing.T) {
	node, c := mockDriver(t)
	root, podDir := t.TempDir(), t.TempDir()
	node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(&csi.NodeGetCapabilitiesResponse{
		Capabilities: []*csi.NodeServiceCapability{rpcCap(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)}}, nil)

	caps, err := c.Capabilities(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !caps.StageUnstage {
		t.Fatalf("capabilities %+v lack STAGE_UNSTAGE", caps)
	}
	v, err := noderequest.FromPV(pv(), false)
	if err != nil {
		t.Fatal(err)
	}
	staging := noderequest.StagingPath(root, "mock.example.com", "vol/1")
	target := noderequest.PublishPath(podDir, "pv-1")
	stageReq := noderequest.StageRequest(root, v, caps, map[string]string{"dev": "x"}, nil, nil)
	pubReq := noderequest.PublishRequest(root, v, noderequest.Pod{Dir: podDir}, caps, noderequest.PublishOptions{})

	gomock.InOrder(
		node.EXPECT().NodeStageVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(_ context.Context, r *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
				if d := cmp.Diff(stageReq, r, protocmp.Transform()); d != "" {
					return nil, status.Error(codes.InvalidArgument, d)
				}
				if st, err := os.Stat(r.StagingTargetPath); err != nil || !st.IsDir() {
					return nil, status.Errorf(codes.FailedPrecondition, "staging dir: %v", err)
				}
				return &csi.NodeStageVolumeResponse{}, nil
			}),
		node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
				if r.StagingTargetPath != staging || r.TargetPath != target {
					return nil, status.Errorf(codes.InvalidArgument, "paths %q %q", r.StagingTargetPath, r.TargetPath)
				}
				// The driver creates the target, as CSI says.
				return &csi.NodePublishVolumeResponse{}, os.Mkdir(r.TargetPath, 0o750)
			}),
		node.EXPECT().NodeUnpublishVolume(gomock.Any(), gomock.Any()).Return(&csi.NodeUnpublishVolumeResponse{}, nil),
		node.EXPECT().NodeUnstageVolume(gomock.Any(), gomock.Any()).DoAndReturn(
			func(_ context.Context, r *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
				if r.VolumeId != "vol/1" || r.StagingTargetPath != staging {
					return nil, status.Errorf(codes.InvalidArgument, "unstage %v", r)
				}
				return &csi.NodeUnstageVolumeResponse{}, nil
			}),
	)
	if err := c.Stage(ctx(t), stageReq); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx(t), pubReq); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatal(err)
	}
	if err := c.Unpublish(ctx(t), noderequest.UnpublishRequest(v, podDir)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(target)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("volume directory left after unpublish: %v", err)
	}
	if err := c.Unstage(ctx(t), noderequest.UnstageRequest(root, v, caps)); err != nil {
		t.Fatal(err)
	}
}

// A driver without STAGE_UNSTAGE is never staged: gomock fails the test on
// any call not expected.
func TestNonStagingDriverIsOnlyPublished(t *testing.T) {
	node, c := mockDriver(t)
	podDir := t.TempDir()
	node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(&csi.NodeGetCapabilitiesResponse{}, nil)
	node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
			if r.StagingTargetPath != "" {
				return nil, status.Error(codes.InvalidArgument, "staging path for a non-staging driver")
			}
			return &csi.NodePublishVolumeResponse{}, nil
		})
	caps, err := c.Capabilities(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := noderequest.FromPV(pv(), false)
	if err := c.Stage(ctx(t), noderequest.StageRequest("/unused", v, caps, nil, nil, nil)); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx(t), noderequest.PublishRequest("/unused", v, noderequest.Pod{Dir: podDir}, caps, noderequest.PublishOptions{})); err != nil {
		t.Fatal(err)
	}
}

func TestPublishErrorIsFinalOrUncertain(t *testing.T) {
	node, c := mockDriver(t)
	podDir := t.TempDir()
	v, _ := noderequest.FromPV(pv(), false)
	req := noderequest.PublishRequest("/unused", v, noderequest.Pod{Dir: podDir}, noderequest.Capabilities{}, noderequest.PublishOptions{})
	gomock.InOrder(
		node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.InvalidArgument, "bad")),
		node.EXPECT().NodePublishVolume(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.DeadlineExceeded, "slow")),
	)
	err := c.Publish(ctx(t), req)
	if err == nil || !Final(err) {
		t.Fatalf("InvalidArgument: err %v, Final %v; want a final error", err, Final(err))
	}
	err = c.Publish(ctx(t), req)
	if err == nil || Final(err) {
		t.Fatalf("DeadlineExceeded: err %v, Final %v; want an uncertain error", err, Final(err))
	}
}

func TestFinal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, true},
		{status.Error(codes.InvalidArgument, "x"), true},
		{status.Error(codes.NotFound, "x"), true},
		{fmt.Errorf("wrapped: %w", status.Error(codes.Internal, "x")), true},
		{status.Error(codes.DeadlineExceeded, "x"), false},
		{status.Error(codes.Canceled, "x"), false},
		{status.Error(codes.Unavailable, "x"), false},
		{status.Error(codes.ResourceExhausted, "x"), false},
		{fmt.Errorf("wrapped: %w", status.Error(codes.Aborted, "x")), false},
		{errors.New("not a gRPC error"), false},
	} {
		if got := Final(tc.err); got != tc.want {
			t.Errorf("Final(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
