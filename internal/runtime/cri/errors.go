package cri

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/podvisor/podvisor/internal/runtime"
)

// codeClass is the one place where a gRPC code becomes a runtime error
// class. Codes without a class (Unknown, Internal, DataLoss) stay plain
// errors: a runtime that answers Unknown has not said why.
func codeClass(c codes.Code) error {
	switch c {
	case codes.NotFound:
		return runtime.ErrNotFound
	case codes.InvalidArgument, codes.OutOfRange, codes.Unimplemented,
		// Bad or missing registry credentials can never succeed as given.
		codes.Unauthenticated, codes.PermissionDenied:
		return runtime.ErrInvalid
	case codes.AlreadyExists, codes.FailedPrecondition, codes.Aborted:
		return runtime.ErrConflict
	case codes.Unavailable, codes.ResourceExhausted:
		return runtime.ErrUnavailable
	case codes.DeadlineExceeded:
		return runtime.ErrTimeout
	case codes.Canceled:
		return context.Canceled
	}
	return nil
}

// criError is an error of a CRI call: what was done, the runtime's own
// message (without gRPC's "rpc error: code = … desc =" wrapping), and the
// class of its code.
type criError struct {
	op    string
	class error // nil: unclassified
	err   error
}

func (e *criError) Error() string {
	msg := e.err.Error()
	if s, ok := status.FromError(e.err); ok {
		msg = s.Message()
	}
	return e.op + ": " + msg
}

func (e *criError) Unwrap() []error {
	if e.class == nil {
		return []error{e.err}
	}
	return []error{e.class, e.err}
}

// classify wraps err, returned by a CRI call doing op, in its class; nil stays nil.
func classify(err error, op string, args ...any) error {
	if err == nil {
		return nil
	}
	if len(args) > 0 {
		op = fmt.Sprintf(op, args...)
	}
	var ce *criError
	if errors.As(err, &ce) {
		return &criError{op: op, class: ce.class, err: err}
	}
	class := codeClass(status.Code(err))
	if class == nil && errors.Is(err, context.DeadlineExceeded) {
		class = runtime.ErrTimeout
	}
	return &criError{op: op, class: class, err: err}
}

// isCode reports whether err carries gRPC code c.
func isCode(err error, c codes.Code) bool {
	return err != nil && status.Code(err) == c
}
