package runtime

import (
	"context"
	"errors"
	"fmt"
)

// Error classes. Every runtime wraps its errors in one of these (with %w),
// so that callers decide on the class — never on an error's text or on one
// runtime's own sentinels. A CRI runtime maps gRPC codes onto them once.
var (
	// ErrNotFound: no such container, sandbox or image.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request can never succeed as given (a spec the
	// runtime cannot run, a malformed image name).
	ErrInvalid = errors.New("invalid argument")
	// ErrConflict: the object is not in a state that allows the operation
	// (starting twice, exec in an exited container); retrying later may work.
	ErrConflict = errors.New("state conflict")
	// ErrUnavailable: the runtime cannot be reached or is shutting down.
	ErrUnavailable = errors.New("runtime unavailable")
	// ErrTimeout: the operation did not finish within its deadline.
	ErrTimeout = errors.New("timeout")
)

// IsNotFound reports whether err is of class ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// NotFoundf is an error of class ErrNotFound whose text is exactly the
// formatted one, for messages users see as written (the kubelet's 404s).
func NotFoundf(format string, args ...any) error {
	return classed{msg: fmt.Sprintf(format, args...), class: ErrNotFound}
}

// classed is an error with its own text and a class.
type classed struct {
	msg   string
	class error
}

func (e classed) Error() string        { return e.msg }
func (e classed) Is(target error) bool { return target == e.class }

// IsInvalid reports whether err is of class ErrInvalid.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalid) }

// IsConflict reports whether err is of class ErrConflict.
func IsConflict(err error) bool { return errors.Is(err, ErrConflict) }

// IsUnavailable reports whether err is of class ErrUnavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// IsTimeout reports whether err is of class ErrTimeout, including a context
// deadline that expired.
func IsTimeout(err error) bool {
	return errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}
