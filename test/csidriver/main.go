// Command csidriver is a small CSI driver for podvisor's tests, in the
// manner of csi-driver-host-path (whose module the Go proxy does not
// serve): a volume is a directory under --data-dir/volumes; the node
// service stages it (bind mount at the staging path, when --stage) and
// publishes it (bind mount at the target path, read-only when asked); the
// controller service creates and deletes the directories. A volume of a
// StorageClass with the parameter fs: tmpfs is a tmpfs of the claim's size
// mounted on its directory, which ControllerExpandVolume and then
// NodeExpandVolume (a remount with the new size) grow online, as a real
// filesystem: df in the pod shows the size. It registers
// itself with the node through the plugin registration directory, as
// node-driver-registrar does for a real driver, and appends every node
// call to --calls as a JSON line for the test to read.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/podvisor/podvisor/internal/host/mounts"
)

func main() {
	var d driver
	var endpoint, regDir string
	flag.StringVar(&d.name, "name", "csi.podvisor.test", "driver name")
	flag.StringVar(&endpoint, "endpoint", "", "the CSI socket to serve")
	flag.StringVar(&regDir, "registration-dir", "", "the node's plugin registration directory (<data dir>/agent/plugins_registry)")
	flag.StringVar(&d.dataDir, "data-dir", "", "where volumes are kept")
	flag.StringVar(&d.nodeID, "node-id", "", "this node's ID")
	flag.StringVar(&d.calls, "calls", "", "file the node calls are appended to")
	flag.BoolVar(&d.stage, "stage", true, "advertise STAGE_UNSTAGE_VOLUME")
	flag.BoolVar(&d.volumeStats, "volume-stats", true, "advertise GET_VOLUME_STATS")
	flag.BoolVar(&d.expand, "expand", true, "advertise EXPAND_VOLUME (controller and node)")
	flag.StringVar(&d.failUnpublish, "fail-unpublish-file", "", "while this file exists, NodeUnpublishVolume fails (a driver in trouble)")
	flag.Parse()
	if endpoint == "" || regDir == "" || d.dataDir == "" || d.nodeID == "" {
		fmt.Fprintln(os.Stderr, "--endpoint, --registration-dir, --data-dir and --node-id are required")
		os.Exit(2)
	}
	if err := run(&d, endpoint, regDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(d *driver, endpoint, regDir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := os.MkdirAll(filepath.Join(d.dataDir, "volumes"), 0o750); err != nil {
		return err
	}
	csiSrv := grpc.NewServer()
	csi.RegisterIdentityServer(csiSrv, d)
	csi.RegisterNodeServer(csiSrv, d)
	csi.RegisterControllerServer(csiSrv, d)
	if err := serve(csiSrv, endpoint); err != nil {
		return err
	}
	defer csiSrv.Stop()

	// The registration socket last: the node calls the driver as soon as
	// it sees it.
	reg := grpc.NewServer()
	regapi.RegisterRegistrationServer(reg, &registrar{info: regapi.PluginInfo{
		Type: regapi.CSIPlugin, Name: d.name, Endpoint: endpoint, SupportedVersions: []string{"1.0.0"},
	}})
	regSock := filepath.Join(regDir, d.name+"-reg.sock")
	if err := serve(reg, regSock); err != nil {
		return err
	}
	defer reg.Stop()
	slog.Info("serving", "driver", d.name, "endpoint", endpoint, "registration", regSock)
	<-ctx.Done()
	// Gone sockets deregister the driver, as a registrar that exits.
	os.Remove(regSock)
	os.Remove(endpoint)
	return nil
}

func serve(s *grpc.Server, socket string) error {
	if err := os.MkdirAll(filepath.Dir(socket), 0o750); err != nil {
		return err
	}
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	go s.Serve(l)
	return nil
}

// registrar is node-driver-registrar's side of plugin registration.
type registrar struct {
	regapi.UnimplementedRegistrationServer
	info regapi.PluginInfo
}

func (r *registrar) GetInfo(context.Context, *regapi.InfoRequest) (*regapi.PluginInfo, error) {
	return &r.info, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *regapi.RegistrationStatus) (*regapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		slog.Error("the node refused the registration", "err", s.Error)
	} else {
		slog.Info("registered with the node")
	}
	return &regapi.RegistrationStatusResponse{}, nil
}

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer
	csi.UnimplementedControllerServer
	name, dataDir, nodeID, calls string
	failUnpublish                string
	stage, volumeStats, expand   bool

	mu        sync.Mutex      // one operation at a time: mounts and the calls file
	ephemeral map[string]bool // inline volumes published, removed when unpublished
}

// Call is one line of the calls file.
type Call struct {
	Method        string            `json:"method"`
	VolumeID      string            `json:"volumeID"`
	Target        string            `json:"target,omitempty"`
	Staging       string            `json:"staging,omitempty"`
	ReadOnly      bool              `json:"readOnly,omitempty"`
	VolumeContext map[string]string `json:"volumeContext,omitempty"`
	// PublishContext is the VolumeAttachment's attachmentMetadata.
	PublishContext map[string]string `json:"publishContext,omitempty"`
	// Capacity is NodeExpandVolume's required bytes.
	Capacity int64 `json:"capacity,omitempty"`
	// Fs is the volume capability's fsType (NodeExpandVolume).
	FsType string `json:"fsType,omitempty"`
}

func (d *driver) record(c Call) {
	if d.calls == "" {
		return
	}
	b, _ := json.Marshal(c)
	f, err := os.OpenFile(d.calls, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		slog.Error("recording call", "err", err)
		return
	}
	defer f.Close()
	f.Write(append(b, '\n'))
}

// Volume IDs are directory names.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func (d *driver) volumeDir(id string) (string, error) {
	if !validID.MatchString(id) {
		return "", status.Errorf(codes.InvalidArgument, "volume ID %q is not a valid directory name", id)
	}
	dir := filepath.Join(d.dataDir, "volumes", id)
	if _, err := os.Stat(dir); err != nil {
		return "", status.Errorf(codes.NotFound, "volume %s: %v", id, err)
	}
	return dir, nil
}

func mounted(path string) bool { return slices.Contains(mounts.Points(), filepath.Clean(path)) }

// bind mounts src at target (made if missing), read-only if asked;
// nothing if target is already a mount point (CSI calls are idempotent).
func bind(src, target string, readOnly bool) error {
	if mounted(target) {
		return nil
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return status.Errorf(codes.Internal, "bind mount %s at %s: %v", src, target, err)
	}
	if readOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return status.Errorf(codes.Internal, "read-only remount of %s: %v", target, err)
		}
	}
	return nil
}

func unbind(target string) error {
	if mounted(target) {
		if err := unix.Unmount(target, 0); err != nil {
			return status.Errorf(codes.Internal, "unmount %s: %v", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// Identity.

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: "0.1.0"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	caps := []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}},
	}}
	if d.expand {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// Node.

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.nodeID}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	if d.stage {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}})
	}
	if d.volumeStats {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_GET_VOLUME_STATS}}})
	}
	if d.expand {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_EXPAND_VOLUME}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeGetVolumeStats reports the filesystem's capacity and what is free of
// it, and as used the sum of the sizes of the volume's regular files and
// the number of its entries (the volume itself included): figures a test
// can compute itself. Not recorded in the calls file: scrapes call it
// often.
func (d *driver) NodeGetVolumeStats(_ context.Context, r *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if !d.volumeStats {
		return nil, status.Error(codes.Unimplemented, "GET_VOLUME_STATS is not advertised")
	}
	if r.VolumeId == "" || r.VolumePath == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID and path are required")
	}
	if !mounted(r.VolumePath) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s", r.VolumeId, r.VolumePath)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(r.VolumePath, &fs); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	var used, entries int64
	err := filepath.WalkDir(r.VolumePath, func(_ string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entries++
		if e.Type().IsRegular() {
			fi, err := e.Info()
			if err != nil {
				return err
			}
			used += fi.Size()
		}
		return nil
	})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	bs := int64(fs.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(fs.Blocks) * bs, Available: int64(fs.Bavail) * bs, Used: used},
		{Unit: csi.VolumeUsage_INODES, Total: int64(fs.Files), Available: int64(fs.Ffree), Used: entries},
	}}, nil
}

func (d *driver) NodeStageVolume(_ context.Context, r *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(Call{Method: "NodeStageVolume", VolumeID: r.VolumeId, Staging: r.StagingTargetPath, VolumeContext: r.VolumeContext, PublishContext: r.PublishContext})
	if !d.stage {
		return nil, status.Error(codes.FailedPrecondition, "this driver does not stage")
	}
	if r.StagingTargetPath == "" || r.VolumeCapability == nil {
		return nil, status.Error(codes.InvalidArgument, "staging path and volume capability are required")
	}
	dir, err := d.volumeDir(r.VolumeId)
	if err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, bind(dir, r.StagingTargetPath, false)
}

func (d *driver) NodeUnstageVolume(_ context.Context, r *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(Call{Method: "NodeUnstageVolume", VolumeID: r.VolumeId, Staging: r.StagingTargetPath})
	return &csi.NodeUnstageVolumeResponse{}, unbind(r.StagingTargetPath)
}

func (d *driver) NodePublishVolume(_ context.Context, r *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(Call{Method: "NodePublishVolume", VolumeID: r.VolumeId, Target: r.TargetPath, Staging: r.StagingTargetPath,
		ReadOnly: r.Readonly, VolumeContext: r.VolumeContext, PublishContext: r.PublishContext})
	if r.TargetPath == "" || r.VolumeCapability == nil {
		return nil, status.Error(codes.InvalidArgument, "target path and volume capability are required")
	}
	if r.VolumeContext["csi.storage.k8s.io/ephemeral"] == "true" {
		// An inline volume lives as long as its publication, as
		// csi-driver-host-path's ephemeral volumes.
		if !validID.MatchString(r.VolumeId) {
			return nil, status.Errorf(codes.InvalidArgument, "volume ID %q is not a valid directory name", r.VolumeId)
		}
		dir := filepath.Join(d.dataDir, "volumes", r.VolumeId)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if d.ephemeral == nil {
			d.ephemeral = map[string]bool{}
		}
		d.ephemeral[r.VolumeId] = true
		return &csi.NodePublishVolumeResponse{}, bind(dir, r.TargetPath, r.Readonly)
	}
	src, err := d.volumeDir(r.VolumeId)
	if err != nil {
		return nil, err
	}
	if d.stage {
		if !mounted(r.StagingTargetPath) {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %q", r.VolumeId, r.StagingTargetPath)
		}
		src = r.StagingTargetPath
	}
	return &csi.NodePublishVolumeResponse{}, bind(src, r.TargetPath, r.Readonly)
}

func (d *driver) NodeUnpublishVolume(_ context.Context, r *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(Call{Method: "NodeUnpublishVolume", VolumeID: r.VolumeId, Target: r.TargetPath})
	if d.failUnpublish != "" {
		if _, err := os.Stat(d.failUnpublish); err == nil {
			return nil, status.Errorf(codes.Internal, "failing as told by %s", d.failUnpublish)
		}
	}
	if err := unbind(r.TargetPath); err != nil {
		return nil, err
	}
	if d.ephemeral[r.VolumeId] && validID.MatchString(r.VolumeId) {
		delete(d.ephemeral, r.VolumeId)
		if err := os.RemoveAll(filepath.Join(d.dataDir, "volumes", r.VolumeId)); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// Controller: volumes are directories.

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	caps := []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}},
	}}
	if d.expand {
		caps = append(caps, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: csi.ControllerServiceCapability_RPC_EXPAND_VOLUME}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// fsParameter is the StorageClass parameter that makes volumes tmpfs
// filesystems of the claim's size.
const fsParameter = "fs"

func (d *driver) CreateVolume(_ context.Context, r *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if !validID.MatchString(r.Name) {
		return nil, status.Errorf(codes.InvalidArgument, "volume name %q is not a valid directory name", r.Name)
	}
	dir := filepath.Join(d.dataDir, "volumes", r.Name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	size := r.GetCapacityRange().GetRequiredBytes()
	switch fs := r.Parameters[fsParameter]; fs {
	case "":
	case "tmpfs":
		d.mu.Lock()
		defer d.mu.Unlock()
		if !mounted(dir) {
			if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0777", size)); err != nil {
				return nil, status.Errorf(codes.Internal, "mounting a tmpfs of %d bytes at %s: %v", size, dir, err)
			}
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "parameter %s: %q is not a filesystem this driver makes (tmpfs)", fsParameter, fs)
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: r.Name, CapacityBytes: size}}, nil
}

func (d *driver) DeleteVolume(_ context.Context, r *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if !validID.MatchString(r.VolumeId) {
		return nil, status.Errorf(codes.InvalidArgument, "volume ID %q is not a valid directory name", r.VolumeId)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if dir := filepath.Join(d.dataDir, "volumes", r.VolumeId); mounted(dir) { // a tmpfs volume
		if err := unix.Unmount(dir, 0); err != nil {
			return nil, status.Errorf(codes.Internal, "unmount %s: %v", dir, err)
		}
	}
	if err := os.RemoveAll(filepath.Join(d.dataDir, "volumes", r.VolumeId)); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, r *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if _, err := d.volumeDir(r.VolumeId); err != nil {
		return nil, err
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: r.VolumeCapabilities}}, nil
}

// ControllerExpandVolume grows a volume: a tmpfs volume needs the node's
// NodeExpandVolume to grow the filesystem the pod sees; a directory has
// no size to grow.
func (d *driver) ControllerExpandVolume(_ context.Context, r *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if !d.expand {
		return nil, status.Error(codes.Unimplemented, "EXPAND_VOLUME is not advertised")
	}
	dir, err := d.volumeDir(r.VolumeId)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: r.GetCapacityRange().GetRequiredBytes(), NodeExpansionRequired: mounted(dir)}, nil
}

// NodeExpandVolume grows the tmpfs published at the volume path to the
// required size (a remount changes the filesystem itself, so every mount
// of it, the pod's too, sees the new size).
func (d *driver) NodeExpandVolume(_ context.Context, r *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(Call{Method: "NodeExpandVolume", VolumeID: r.VolumeId, Target: r.VolumePath, Staging: r.StagingTargetPath,
		Capacity: r.GetCapacityRange().GetRequiredBytes(), FsType: r.GetVolumeCapability().GetMount().GetFsType()})
	if !d.expand {
		return nil, status.Error(codes.Unimplemented, "EXPAND_VOLUME is not advertised")
	}
	if r.VolumeId == "" || r.VolumePath == "" || r.VolumeCapability == nil {
		return nil, status.Error(codes.InvalidArgument, "volume ID, volume path and volume capability are required")
	}
	dir, err := d.volumeDir(r.VolumeId)
	if err != nil {
		return nil, err
	}
	if !mounted(r.VolumePath) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s", r.VolumeId, r.VolumePath)
	}
	size := r.GetCapacityRange().GetRequiredBytes()
	if mounted(dir) {
		if err := unix.Mount("", r.VolumePath, "", unix.MS_REMOUNT, fmt.Sprintf("size=%d", size)); err != nil {
			return nil, status.Errorf(codes.Internal, "growing the tmpfs at %s to %d bytes: %v", r.VolumePath, size, err)
		}
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}
