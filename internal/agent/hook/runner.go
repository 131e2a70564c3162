package hook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// ExecFunc runs cmd in the container's context and returns its combined
// output and exit code; err is for a command that could not be run at all.
// It must kill the command and return when ctx is done or, if timeout > 0,
// once timeout has passed.
type ExecFunc func(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (output []byte, exitCode int, err error)

// ErrBudgetExceeded is returned (wrapped) when a handler did not finish
// within the budget given to Run; the handler has been cancelled.
var ErrBudgetExceeded = errors.New("hook did not finish within its time budget")

// Config of a Runner. Clock and Log default to the real clock and slog.Default.
type Config struct {
	Exec  ExecFunc // nil: exec handlers fail
	Clock clock.Clock
	Log   *slog.Logger
}

// Runner runs lifecycle hook handlers. It is safe for concurrent use.
type Runner struct {
	exec  ExecFunc
	clock clock.Clock
	log   *slog.Logger
	http  *http.Client
}

// New returns a Runner for cfg.
func New(cfg Config) *Runner {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Runner{exec: cfg.Exec, clock: cfg.Clock, log: cfg.Log, http: newHTTPClient()}
}

// result of one handler run; output is only set by exec handlers.
type result struct {
	output []byte
	err    error
}

// handler is one action of a LifecycleHandler, ready to run.
type handler struct {
	run func(ctx context.Context) result
	// describe turns a failure into the message for the pod worker, as upstream.
	describe func(result) string
}

// Run executes h, the kind hook of container c of pod, for the container
// instance containerID. podIP is where an httpGet without a host goes.
// budget is the time the handler may take (for preStop the rest of the grace
// period); 0 means no limit. When it runs out, the handler is cancelled and
// Run returns an error wrapping ErrBudgetExceeded. Cancelling ctx cancels the
// handler too.
//
// On failure msg says what failed in upstream's words; see the package
// documentation for what the pod worker does with it.
func (r *Runner) Run(ctx context.Context, kind Kind, pod *v1.Pod, c *v1.Container, containerID, podIP string, h *v1.LifecycleHandler, budget time.Duration) (msg string, err error) {
	log := r.log.With("hook", kind.String(), "pod", pod.Namespace+"/"+pod.Name, "container", c.Name, "containerID", containerID)
	hd, err := r.handler(log, pod, c, containerID, podIP, h, budget)
	if err != nil {
		msg = fmt.Sprintf("Cannot run handler: %v", err)
		log.Warn("lifecycle hook cannot run", "err", err)
		return msg, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The budget timer exists before the handler starts, so a handler's own
	// timers are never the only waiters on a fake clock.
	var expired <-chan time.Time
	if budget > 0 {
		t := r.clock.NewTimer(budget)
		defer t.Stop()
		expired = t.C()
	}
	done := make(chan result, 1)
	go func() { done <- hd.run(ctx) }()

	var res result
	select {
	case res = <-done:
	case <-expired:
		// Cut off without waiting: the handler sees ctx cancelled and its
		// goroutine ends on its own (done is buffered).
		cancel()
		res = result{err: fmt.Errorf("%w of %v", ErrBudgetExceeded, budget)}
	}
	if res.err == nil {
		return "", nil
	}
	msg = hd.describe(res)
	log.Warn("lifecycle hook failed", "err", res.err)
	return msg, res.err
}

// handler picks the action of h. Like upstream, tcpSocket (deprecated, kept in
// the API for compatibility) is not an action: a hook with it fails.
func (r *Runner) handler(log *slog.Logger, pod *v1.Pod, c *v1.Container, containerID, podIP string, h *v1.LifecycleHandler, budget time.Duration) (handler, error) {
	switch {
	case h == nil:
		return handler{}, errors.New("invalid handler: no handler")
	case h.Exec != nil:
		return r.execHandler(pod, c, containerID, h.Exec, budget), nil
	case h.HTTPGet != nil:
		return r.httpHandler(log, pod, c, podIP, h.HTTPGet), nil
	case h.Sleep != nil:
		return r.sleepHandler(pod, c, h.Sleep), nil
	}
	if h.TCPSocket != nil {
		log.Warn("tcpSocket is not supported as a lifecycle hook handler; the hook fails, as upstream")
	}
	return handler{}, fmt.Errorf("invalid handler: %v", h)
}

// podDesc names a pod in messages as upstream does: name_namespace(uid).
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
