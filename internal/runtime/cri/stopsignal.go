package cri

import (
	"context"
	"encoding/json"
	"errors"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// stopBySignal sends sig to a running container's main process when the
// runtime did not take it as the container's stop signal (its status does
// not echo it back), and waits up to grace for that process to exit. It
// reports whether it did so; the caller's CRI stop then only kills what is
// left. The signal goes through a pidfd, so a pid reused after the read
// of the status cannot be hit once the pidfd is open.
func (r *Runtime) stopBySignal(ctx context.Context, id string, sig syscall.Signal, grace time.Duration) bool {
	resp, err := r.rs.ContainerStatus(quiet(ctx), id, true)
	if err != nil {
		return false
	}
	s := resp.GetStatus()
	if s.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return false
	}
	if want, _ := criSignal(sig); s.GetStopSignal() == want {
		return false // the runtime sends it itself
	}
	pid, err := mainPid(resp)
	if err != nil {
		r.log.Warn("cannot send the container's stop signal: the runtime sends its default", "id", id, "signal", sig, "err", err)
		return false
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false // gone already
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, sig, nil, 0); err != nil {
		return false
	}
	r.log.Info("stop signal sent by podvisor: the runtime ignores the container's", "id", id, "signal", sig, "grace", grace)
	waitExit(ctx, pidfd, grace)
	return true
}

// waitExit waits until the process of pidfd exits, grace passes or ctx ends.
func waitExit(ctx context.Context, pidfd int, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(min(left, 100*time.Millisecond)/time.Millisecond)+1)
		if n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
			return
		}
	}
}

// unmarshalInfo decodes the "info" entry of a verbose CRI status.
func unmarshalInfo(info map[string]string, v any) error {
	s, ok := info["info"]
	if !ok {
		return errors.New("no info")
	}
	return json.Unmarshal([]byte(s), v)
}
