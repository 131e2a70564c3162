// Package nodeclient talks to a CSI driver's node service over its unix
// socket, as the kubelet's CSI plugin does: it sends the requests
// noderequest builds and creates and removes the directories around them.
// Deciding what to send is noderequest's; this is the thin I/O shell.
package nodeclient

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
)

// Client is a connection to one driver's node service. Calls are bounded by
// the caller's context.
type Client struct {
	conn *grpc.ClientConn
	node csi.NodeClient
	id   csi.IdentityClient
}

// Dial connects to a driver's endpoint: a unix socket path, with or without
// the unix:// prefix that drivers register. It does not wait for the
// driver; the first call does.
func Dial(endpoint string) (*Client, error) {
	target := endpoint
	if filepath.IsAbs(endpoint) {
		target = "unix://" + endpoint
	}
	// The authority is fixed, as the kubelet's: a socket path is no host
	// name, and some drivers' gRPC servers reject odd :authority values.
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"))
	if err != nil {
		return nil, fmt.Errorf("csi endpoint %s: %w", endpoint, err)
	}
	return &Client{conn: conn, node: csi.NewNodeClient(conn), id: csi.NewIdentityClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// NodeInfo is what a driver says about this node (NodeGetInfo).
type NodeInfo struct {
	NodeID     string
	MaxVolumes int64             // 0: no limit
	Topology   map[string]string // accessible topology segments
}

// NodeGetInfo asks the driver for its node ID, volume limit and topology.
func (c *Client) NodeGetInfo(ctx context.Context) (NodeInfo, error) {
	resp, err := c.node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return NodeInfo{}, fmt.Errorf("NodeGetInfo: %w", err)
	}
	if resp.GetNodeId() == "" {
		return NodeInfo{}, errors.New("NodeGetInfo: the driver returned an empty node ID")
	}
	return NodeInfo{NodeID: resp.GetNodeId(), MaxVolumes: resp.GetMaxVolumesPerNode(),
		Topology: resp.GetAccessibleTopology().GetSegments()}, nil
}

// Capabilities asks the driver for its node service capabilities.
func (c *Client) Capabilities(ctx context.Context) (noderequest.Capabilities, error) {
	resp, err := c.node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		return noderequest.Capabilities{}, fmt.Errorf("NodeGetCapabilities: %w", err)
	}
	return noderequest.CapabilitiesFrom(resp), nil
}

// Stage creates the staging directory and calls NodeStageVolume. A nil
// request (the driver does not stage) does nothing.
func (c *Client) Stage(ctx context.Context, req *csi.NodeStageVolumeRequest) error {
	if req == nil {
		return nil
	}
	if err := os.MkdirAll(req.GetStagingTargetPath(), 0o750); err != nil {
		return fmt.Errorf("creating staging directory: %w", err)
	}
	if _, err := c.node.NodeStageVolume(ctx, req); err != nil {
		return fmt.Errorf("NodeStageVolume %s: %w", req.GetVolumeId(), err)
	}
	return nil
}

// Unstage calls NodeUnstageVolume; a nil request does nothing.
func (c *Client) Unstage(ctx context.Context, req *csi.NodeUnstageVolumeRequest) error {
	if req == nil {
		return nil
	}
	if _, err := c.node.NodeUnstageVolume(ctx, req); err != nil {
		return fmt.Errorf("NodeUnstageVolume %s: %w", req.GetVolumeId(), err)
	}
	return nil
}

// Publish creates the target's parent directory and calls
// NodePublishVolume. The target itself is left to the driver, as the kubelet
// does: CSI says the driver creates it (a file for block volumes).
func (c *Client) Publish(ctx context.Context, req *csi.NodePublishVolumeRequest) error {
	if err := os.MkdirAll(filepath.Dir(req.GetTargetPath()), 0o750); err != nil {
		return fmt.Errorf("creating publish directory: %w", err)
	}
	if _, err := c.node.NodePublishVolume(ctx, req); err != nil {
		return fmt.Errorf("NodePublishVolume %s: %w", req.GetVolumeId(), err)
	}
	return nil
}

// Unpublish calls NodeUnpublishVolume and then removes the emptied target,
// the node's record of the volume (noderequest.RecordFileName) and the
// volume directory. The target goes first and os.Remove only removes what
// is empty and not a mount point, so a driver that did not unmount loses
// nothing, and the record stays to try again.
func (c *Client) Unpublish(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) error {
	if _, err := c.node.NodeUnpublishVolume(ctx, req); err != nil {
		return fmt.Errorf("NodeUnpublishVolume %s: %w", req.GetVolumeId(), err)
	}
	target := req.GetTargetPath()
	for _, dir := range []string{target, filepath.Join(filepath.Dir(target), noderequest.RecordFileName), filepath.Dir(target)} {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s after NodeUnpublishVolume: %w", dir, err)
		}
	}
	return nil
}

// VolumeStats calls NodeGetVolumeStats.
func (c *Client) VolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	resp, err := c.node.NodeGetVolumeStats(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("NodeGetVolumeStats %s: %w", req.GetVolumeId(), err)
	}
	return resp, nil
}

// Final reports whether a failed call is known not to be still in progress
// in the driver. As upstream, a call that timed out, was cancelled, found
// the driver unavailable or busy, or failed before reaching the driver
// leaves the volume in an uncertain state: the caller must treat it as
// possibly mounted (and unpublish/unstage it when the pod goes away).
func Final(err error) bool {
	if err == nil {
		return true
	}
	// FromError finds a status wrapped by our %w too.
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return false
	}
	return true
}

// Expand calls NodeExpandVolume and returns the capacity the driver
// reports (0: not reported).
func (c *Client) Expand(ctx context.Context, req *csi.NodeExpandVolumeRequest) (int64, error) {
	resp, err := c.node.NodeExpandVolume(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("NodeExpandVolume %s: %w", req.GetVolumeId(), err)
	}
	return resp.GetCapacityBytes(), nil
}
