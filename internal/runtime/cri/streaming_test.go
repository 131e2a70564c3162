package cri

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Sessions go through the runtime's own streaming server: the URLs it
// hands out serve kubectl's SPDY protocols.
func TestExecAndPortForwardThroughTheRuntimesStreamingServer(t *testing.T) {
	r, ctx, pod := podFixture(t)
	id := createStart(t, r, pod.container("web", "sh", "-c", "echo hello from the pod > /tmp/index.html; exec httpd -f -p 8080 -h /tmp"))

	u, err := r.GetExec(ctx, runtime.ExecRequest{ContainerID: id, Cmd: []string{"sh", "-c", "echo out; echo err >&2"}, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := remotecommand.NewSPDYExecutor(&rest.Config{}, "POST", u)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := e.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "out\n" || errOut.String() != "err\n" {
		t.Errorf("exec session: stdout %q stderr %q", out.String(), errOut.String())
	}

	u, err = r.GetPortForward(ctx, runtime.PortForwardRequest{PodUID: pod.spec.PodUID})
	if err != nil {
		t.Fatal(err)
	}
	tr, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(spdy.NewDialer(upgrader, &http.Client{Transport: tr}, "POST", u),
		[]string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() { close(stop); <-done }()
	<-ready
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", ports[0].Local))
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port-forward: %v", err)
		}
	}
	if string(body) != "hello from the pod\n" {
		t.Errorf("port-forward: body %q", body)
	}

	if _, err := r.GetPortForward(ctx, runtime.PortForwardRequest{PodUID: "no-such-pod"}); !runtime.IsNotFound(err) {
		t.Errorf("port-forward to a pod without a sandbox: %v, want ErrNotFound", err)
	}
	if err := r.Stop(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetExec(ctx, runtime.ExecRequest{ContainerID: id, Cmd: []string{"true"}, Stdout: true}); !runtime.IsConflict(err) {
		t.Errorf("exec session in an exited container: %v, want ErrConflict", err)
	}
	if _, err := r.GetAttach(ctx, runtime.AttachRequest{ContainerID: "nosuch", Stdout: true}); !runtime.IsNotFound(err) {
		t.Errorf("attach to an unknown container: %v, want ErrNotFound", err)
	}
}
