package probe

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// grpcServer serves on 127.0.0.1; with health it registers the standard
// health service: "" SERVING, "down" NOT_SERVING.
func grpcServer(t *testing.T, withHealth bool) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	if withHealth {
		hs := health.NewServer()
		hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
		healthpb.RegisterHealthServer(s, hs)
	}
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return int32(l.Addr().(*net.TCPAddr).Port)
}

func runGRPC(t *testing.T, port int32, service *string, timeout time.Duration) outcome {
	t.Helper()
	p := &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: port, Service: service}}}
	tm := timingOf(liveness, p)
	if timeout > 0 {
		tm.timeout = timeout
	}
	return runWithRetries(context.Background(), newAction(testEnv(), tm, p, &v1.Container{Name: "app"}, "id", "127.0.0.1"))
}

func TestGRPCHealthCheck(t *testing.T) {
	port := grpcServer(t, true)
	if o := runGRPC(t, port, nil, 0); o.result != resultSuccess || o.output != "service healthy" {
		t.Errorf("serving: %+v", o)
	}
	if o := runGRPC(t, port, ptr.To("down"), 0); o.result != resultFailure || o.output != `service unhealthy (responded with "NOT_SERVING")` {
		t.Errorf("not serving: %+v", o)
	}
	if o := runGRPC(t, port, ptr.To("nosuch"), 0); o.result != resultFailure || !strings.Contains(o.output, "unknown service") {
		t.Errorf("unknown service: %+v", o)
	}
}

func TestGRPCFailures(t *testing.T) {
	bare := grpcServer(t, false)
	if o := runGRPC(t, bare, nil, 0); o.result != resultFailure ||
		!strings.HasPrefix(o.output, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health)") {
		t.Errorf("no health service: %+v", o)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := int32(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	if o := runGRPC(t, closed, nil, 0); o.result != resultFailure || !strings.HasPrefix(o.output, "error: failed to connect service at") {
		t.Errorf("closed port: %+v", o)
	}
	full := int32(fullListener(t))
	begin := time.Now()
	if o := runGRPC(t, full, nil, 300*time.Millisecond); o.result != resultFailure || o.output != "timeout: health rpc did not complete within 300ms" {
		t.Errorf("timeout: %+v", o)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}
