package hook

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A handler with no action fails, as upstream.
func TestHandlerWithoutActionFails(t *testing.T) {
	r := New(Config{Exec: newLocalExec().Exec})
	for name, h := range map[string]*v1.LifecycleHandler{"empty": {}, "nil": nil} {
		msg, err := r.Run(context.Background(), PostStart, testPod(), &v1.Container{Name: "c"}, "cid", "", h, 0)
		if err == nil || !strings.HasPrefix(msg, "Cannot run handler: invalid handler: ") {
			t.Errorf("%s handler: %q, %v", name, msg, err)
		}
	}
}

// tcpSocket is deprecated for hooks and not run: upstream's handler fails it.
func TestTCPSocketHookFailsAsUpstream(t *testing.T) {
	r := New(Config{Exec: newLocalExec().Exec})
	h := &v1.LifecycleHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt(8080)}}
	msg, err := r.Run(context.Background(), PreStop, testPod(), &v1.Container{Name: "c"}, "cid", "", h, 0)
	if err == nil || !strings.HasPrefix(msg, "Cannot run handler: invalid handler: &LifecycleHandler{") || !strings.Contains(msg, "TCPSocket:&TCPSocketAction{") {
		t.Fatalf("got %q, %v", msg, err)
	}
}

// §7: failures appear as events with upstream's reasons; the output stays out of them.
func TestFailedEvents(t *testing.T) {
	if e := FailedEvent(PostStart); e != (Event{"Warning", "FailedPostStartHook", "PostStartHook failed"}) {
		t.Errorf("postStart event %+v", e)
	}
	if e := FailedEvent(PreStop); e != (Event{"Warning", "FailedPreStopHook", "PreStopHook failed"}) {
		t.Errorf("preStop event %+v", e)
	}
	if PostStartKillMessage != "FailedPostStartHook" {
		t.Errorf("kill message %q", PostStartKillMessage)
	}
	msg := `Exec lifecycle hook ([false]) for Container "c" in Pod "p_ns(uid)" failed - error: command 'false' exited with 1: , message: ""`
	if reason, m := PostStartWaiting(msg); reason != "PostStartHookError" || m != msg {
		t.Errorf("waiting %q %q", reason, m)
	}
	err := StartContainerError("c", "boom")
	if err.Error() != `failed to "StartContainer" for "c" with PostStartHookError: "boom"` || !errors.Is(err, ErrPostStartHook) {
		t.Errorf("sync error %q", err)
	}
}

func TestKindNames(t *testing.T) {
	if PostStart.String() != "PostStart" || PreStop.String() != "PreStop" || Kind(0).String() != "Unknown" {
		t.Error("kind names")
	}
}
