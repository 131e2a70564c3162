// Package csitest serves the other ends of the node's CSI conversations for
// tests: csi-test's mock CSI driver and a fake node-driver-registrar, each
// a real gRPC server on a unix socket. Only tests import it.
package csitest

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/golang/mock/gomock"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"google.golang.org/grpc"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Driver serves csi-test's mock driver on socket until the test ends and
// returns its node server to set expectations on; gomock fails the test on
// any call that was not expected.
func Driver(t *testing.T, socket string) *driver.MockNodeServer {
	t.Helper()
	ctrl := gomock.NewController(t)
	node := driver.NewMockNodeServer(ctrl)
	d := driver.NewMockCSIDriver(&driver.MockCSIDriverServers{
		Identity:   driver.NewMockIdentityServer(ctrl),
		Controller: driver.NewMockControllerServer(ctrl),
		Node:       node,
	})
	if err := d.StartOnAddress("unix", socket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return node
}

// Registrar is node-driver-registrar's registration server, faked: it
// answers GetInfo with Info and records the statuses it is told.
type Registrar struct {
	regapi.UnimplementedRegistrationServer
	Info regapi.PluginInfo

	mu       sync.Mutex
	statuses []*regapi.RegistrationStatus
}

func (r *Registrar) GetInfo(context.Context, *regapi.InfoRequest) (*regapi.PluginInfo, error) {
	return &r.Info, nil
}

func (r *Registrar) NotifyRegistrationStatus(_ context.Context, s *regapi.RegistrationStatus) (*regapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statuses = append(r.statuses, s)
	return &regapi.RegistrationStatusResponse{}, nil
}

// Told returns the statuses the registrar has been told, oldest first.
func (r *Registrar) Told() []*regapi.RegistrationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*regapi.RegistrationStatus(nil), r.statuses...)
}

// Serve runs the registrar on socket; stop (also run when the test ends)
// stops it and removes the socket, as a registrar that exits does.
func (r *Registrar) Serve(t *testing.T, socket string) (stop func()) {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	regapi.RegisterRegistrationServer(s, r)
	go s.Serve(l)
	var once sync.Once
	stop = func() { once.Do(func() { s.Stop(); os.Remove(socket) }) }
	t.Cleanup(stop)
	return stop
}
