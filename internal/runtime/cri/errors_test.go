package cri

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/podvisor/podvisor/internal/runtime"
)

func TestClassifyMapsEveryGRPCCodeOnce(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		want error // nil: no class
	}{
		{codes.OK, nil},
		{codes.Canceled, context.Canceled},
		{codes.Unknown, nil},
		{codes.InvalidArgument, runtime.ErrInvalid},
		{codes.DeadlineExceeded, runtime.ErrTimeout},
		{codes.NotFound, runtime.ErrNotFound},
		{codes.AlreadyExists, runtime.ErrConflict},
		{codes.PermissionDenied, runtime.ErrInvalid},
		{codes.ResourceExhausted, runtime.ErrUnavailable},
		{codes.FailedPrecondition, runtime.ErrConflict},
		{codes.Aborted, runtime.ErrConflict},
		{codes.OutOfRange, runtime.ErrInvalid},
		{codes.Unimplemented, runtime.ErrInvalid},
		{codes.Internal, nil},
		{codes.Unavailable, runtime.ErrUnavailable},
		{codes.DataLoss, nil},
		{codes.Unauthenticated, runtime.ErrInvalid},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			src := status.Error(tc.code, "the runtime's words")
			err := classify(src, "start container %s", "abc")
			if tc.code == codes.OK {
				// status.Error(OK) is nil: nothing to classify.
				if err != nil {
					t.Fatalf("classify(nil) = %v", err)
				}
				return
			}
			if got := err.Error(); got != "start container abc: the runtime's words" {
				t.Errorf("message %q", got)
			}
			for _, class := range []error{runtime.ErrNotFound, runtime.ErrInvalid, runtime.ErrConflict, runtime.ErrUnavailable, runtime.ErrTimeout, context.Canceled} {
				if got := errors.Is(err, class); got != (class == tc.want) {
					t.Errorf("errors.Is(%v) = %v", class, got)
				}
			}
			if status.Code(err) != tc.code {
				t.Errorf("the gRPC status is lost: code %v", status.Code(err))
			}
		})
	}
}

func TestClassifyKeepsTheClassWhenRewrapped(t *testing.T) {
	inner := classify(status.Error(codes.NotFound, "no such container"), "status")
	outer := classify(fmt.Errorf("wrapped: %w", inner), "remove container x")
	if !runtime.IsNotFound(outer) {
		t.Fatalf("%v is not ErrNotFound", outer)
	}
}

func TestClassifyAClientSideDeadlineIsATimeout(t *testing.T) {
	if err := classify(fmt.Errorf("dial: %w", context.DeadlineExceeded), "version"); !runtime.IsTimeout(err) || !errors.Is(err, runtime.ErrTimeout) {
		t.Fatalf("%v is not ErrTimeout", err)
	}
}
