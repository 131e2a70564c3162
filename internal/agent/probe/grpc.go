package probe

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// grpcAction calls grpc.health.v1.Health/Check: success is SERVING.
type grpcAction struct {
	addr      string
	service   string
	timeout   time.Duration
	userAgent string
}

func (a *grpcAction) run(ctx context.Context) outcome {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+a.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()), // no credentials, as upstream
		grpc.WithUserAgent(a.userAgent),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return probeDialer().DialContext(ctx, "tcp", addr)
		}),
	)
	if err != nil {
		return outcome{result: resultFailure, output: fmt.Sprintf("error: failed to connect service at %q: %v", a.addr, err)}
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: a.service})
	if err != nil {
		return outcome{result: resultFailure, output: a.describe(err)}
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return outcome{result: resultFailure, output: fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String())}
	}
	return outcome{result: resultSuccess, output: "service healthy"}
}

// describe words a failed Check the way upstream does.
func (a *grpcAction) describe(err error) string {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Sprintf("error: failed to connect service at %q: %s", a.addr, st.Message())
	case codes.Unimplemented:
		return "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): " + st.Message()
	case codes.DeadlineExceeded:
		return fmt.Sprintf("timeout: health rpc did not complete within %v", a.timeout)
	}
	return fmt.Sprintf("error: health rpc probe failed: %v", err)
}
