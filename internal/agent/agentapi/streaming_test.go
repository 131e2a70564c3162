package agentapi

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/podvisor/podvisor/internal/runtime"
)

// fakeStreams runs upstream's streaming server over a fake runtime: the
// agent API's part (finding the container, proxying, translating WebSocket)
// is what these tests check.
type fakeStreams struct {
	srv      streaming.Server
	runnings map[string]string // "<pod uid>/<container>" → container ID
}

func newFakeStreams(t *testing.T) *fakeStreams {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := streaming.DefaultConfig
	cfg.Addr = ln.Addr().String()
	cfg.BaseURL = &url.URL{Scheme: "http", Host: cfg.Addr, Path: "/"}
	srv, err := streaming.NewServer(cfg, fakeRuntime{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return &fakeStreams{srv: srv, runnings: map[string]string{"uid-web/app": "app-1", "uid-web/sidecar": "sidecar-1"}}
}

func (f *fakeStreams) ContainerID(_ context.Context, uid types.UID, name string) (string, error) {
	return f.runnings[string(uid)+"/"+name], nil
}

func (f *fakeStreams) Run(_ context.Context, id string, cmd []string) ([]byte, error) {
	if cmd[0] == "false" {
		return nil, errors.New(`command ["false"] exited with 1: `)
	}
	return []byte(id + " ran " + strings.Join(cmd, "+")), nil
}

func (f *fakeStreams) GetExec(_ context.Context, req runtime.ExecRequest) (*url.URL, error) {
	resp, err := f.srv.GetExec(&runtimeapi.ExecRequest{ContainerId: req.ContainerID, Cmd: req.Cmd,
		Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr, Tty: req.TTY})
	if err != nil {
		return nil, err
	}
	return url.Parse(resp.Url)
}

func (f *fakeStreams) GetAttach(_ context.Context, req runtime.AttachRequest) (*url.URL, error) {
	return nil, fmt.Errorf("container %s: attach is not supported", req.ContainerID)
}

func (f *fakeStreams) GetPortForward(_ context.Context, req runtime.PortForwardRequest) (*url.URL, error) {
	resp, err := f.srv.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: req.PodUID, Port: req.Ports})
	if err != nil {
		return nil, err
	}
	return url.Parse(resp.Url)
}

// fakeRuntime: "cat" copies stdin to stdout, "exit N" exits N, "sizes"
// prints each terminal size until stdin ends; a forwarded port answers
// "<pod>:<port> " followed by what it received.
type fakeRuntime struct{}

func (fakeRuntime) Exec(_ context.Context, id string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommandserver.TerminalSize) error {
	switch cmd[0] {
	case "cat":
		fmt.Fprintf(errOut, "in %s\n", id)
		_, err := io.Copy(out, in)
		return err
	case "exit":
		var code int
		fmt.Sscan(cmd[1], &code)
		return utilexec.CodeExitError{Err: fmt.Errorf("exit %d", code), Code: code}
	case "sizes":
		go io.Copy(io.Discard, in)
		for size := range resize {
			fmt.Fprintf(out, "%dx%d\n", size.Width, size.Height)
			if size.Width == 1 {
				return nil
			}
		}
		return nil
	}
	return fmt.Errorf("%s: not found", cmd[0])
}

func (fakeRuntime) Attach(context.Context, string, io.Reader, io.WriteCloser, io.WriteCloser, bool, <-chan remotecommandserver.TerminalSize) error {
	return errors.New("no attach")
}

func (fakeRuntime) PortForward(_ context.Context, pod string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	fmt.Fprintf(stream, "%s:%d ", pod, port)
	_, err := io.Copy(stream, stream)
	return err
}

func startStreamingServer(t *testing.T) (*testServer, *rest.Config) {
	t.Helper()
	fs := newFakeStreams(t)
	web := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"}}
	ts := startServer(t, func(c *Config) {
		c.Pods = func() []*v1.Pod { return []*v1.Pod{web} }
		c.Streams = fs
	})
	cert := ts.ca.issue("kube-apiserver-kubelet-client", nil, x509.ExtKeyUsageClientAuth)
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return ts, &rest.Config{Host: ts.url, TLSClientConfig: rest.TLSClientConfig{
		CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		KeyData:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
		CAData:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.ca.cert.Raw}),
	}}
}

// protocols are the executors of client-go: SPDY, and WebSocket (v5, which
// the agent translates to SPDY, as the kubelet does).
var protocols = map[string]func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error){
	"spdy": func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
		return remotecommand.NewSPDYExecutor(cfg, "POST", u)
	},
	"websocket": func(cfg *rest.Config, u *url.URL) (remotecommand.Executor, error) {
		return remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
	},
}

func execURL(ts *testServer, path string, query ...string) *url.URL {
	u, _ := url.Parse(ts.url + path + "?" + strings.Join(query, "&"))
	return u
}

func TestExecStreamsInBothProtocols(t *testing.T) {
	ts, cfg := startStreamingServer(t)
	for name, newExecutor := range protocols {
		t.Run(name, func(t *testing.T) {
			e, err := newExecutor(cfg, execURL(ts, "/exec/default/web/app", "command=cat", "input=1", "output=1", "error=1"))
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if err := e.StreamWithContext(context.Background(), remotecommand.StreamOptions{
				Stdin: strings.NewReader("hello\n"), Stdout: &out, Stderr: &errOut}); err != nil {
				t.Fatal(err)
			}
			if out.String() != "hello\n" || errOut.String() != "in app-1\n" {
				t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
			}

			// The uid form, and another container of the pod.
			e, err = newExecutor(cfg, execURL(ts, "/exec/default/web/uid-web/sidecar", "command=exit", "command=3", "output=1"))
			if err != nil {
				t.Fatal(err)
			}
			err = e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard})
			var exit utilexec.ExitError
			if !errors.As(err, &exit) || exit.ExitStatus() != 3 {
				t.Errorf("got %v, want exit code 3", err)
			}
		})
	}
}

func TestExecTerminalResizesInBothProtocols(t *testing.T) {
	ts, cfg := startStreamingServer(t)
	for name, newExecutor := range protocols {
		t.Run(name, func(t *testing.T) {
			e, err := newExecutor(cfg, execURL(ts, "/exec/default/web/app", "command=sizes", "input=1", "output=1", "tty=1"))
			if err != nil {
				t.Fatal(err)
			}
			sizes := make(chan remotecommand.TerminalSize, 3)
			sizes <- remotecommand.TerminalSize{Width: 80, Height: 24}
			sizes <- remotecommand.TerminalSize{Width: 120, Height: 40}
			sizes <- remotecommand.TerminalSize{Width: 1, Height: 1}
			stdin, hold := io.Pipe()
			defer hold.Close()
			var out bytes.Buffer
			if err := e.StreamWithContext(context.Background(), remotecommand.StreamOptions{
				Stdin: stdin, Stdout: &out, Tty: true, TerminalSizeQueue: sizeQueue(sizes)}); err != nil {
				t.Fatal(err)
			}
			if out.String() != "80x24\n120x40\n1x1\n" {
				t.Errorf("sizes seen: %q", out.String())
			}
		})
	}
}

type sizeQueue chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q
	if !ok {
		return nil
	}
	return &s
}

// Errors before the upgrade are the kubelet's: status codes and text.
func TestExecRefusalsAreTheKubelets(t *testing.T) {
	ts, cfg := startStreamingServer(t)
	c := ts.apiserver()
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/exec/default/nosuch/app?command=ls&output=1", http.StatusNotFound, "pod does not exist"},
		{"/exec/default/web/stopped?command=ls&output=1", http.StatusInternalServerError, `container not found ("stopped")`},
		{"/exec/default/web/other-uid/app?command=ls&output=1", http.StatusInternalServerError, `container not found ("app")`},
		{"/exec/default/web/app?command=ls", http.StatusBadRequest, "you must specify at least 1 of stdin, stdout, stderr"},
		// 500, not 400: the kubelet's responder answers every proxy error so.
		{"/exec/default/web/app?command=ls&output=1", http.StatusInternalServerError, "Upgrade request required"},
		{"/attach/default/web/app?output=1", http.StatusInternalServerError, "attach is not supported"},
		{"/portForward/default/nosuch", http.StatusNotFound, "pod does not exist"},
		{"/portForward/default/web/other-uid", http.StatusNotFound, "pod not found"},
	} {
		if code, body := get(t, c, ts.url+tc.path); code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %q, want %d %q", tc.path, code, body, tc.code, tc.body)
		}
	}
	// Streams keep the authorization of every other path.
	stranger := ts.ca.issue("someone", nil, x509.ExtKeyUsageClientAuth)
	if code, _ := get(t, ts.client(&stranger), ts.url+"/exec/default/web/app?command=cat&output=1"); code != http.StatusForbidden {
		t.Errorf("a stranger's exec: %d, want 403", code)
	}
	e, err := remotecommand.NewSPDYExecutor(cfg, "POST", execURL(ts, "/exec/default/web/stopped", "command=ls", "output=1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard}); err == nil ||
		!strings.Contains(err.Error(), `container not found ("stopped")`) {
		t.Errorf("kubectl would print %v", err)
	}
}

func TestRunReturnsTheOutput(t *testing.T) {
	ts, _ := startStreamingServer(t)
	c := ts.apiserver()
	post := func(path string) (int, string) {
		resp, err := c.Post(ts.url+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/run/default/web/app?cmd=echo+hi+there"); code != http.StatusOK || body != "app-1 ran echo+hi+there" {
		t.Errorf("run: %d %q", code, body)
	}
	if code, body := post("/run/default/web/uid-web/app?cmd=false"); code != http.StatusInternalServerError || !strings.Contains(body, "exited with 1") {
		t.Errorf("run false: %d %q", code, body)
	}
	if code, body := post("/run/default/nosuch/app?cmd=ls"); code != http.StatusNotFound || !strings.Contains(body, "pod does not exist") {
		t.Errorf("run in a missing pod: %d %q", code, body)
	}
}

// Port-forward through SPDY, and through a WebSocket tunnel (kubectl's
// default), each forwarded connection reaching the pod's port.
func TestPortForwardInBothProtocols(t *testing.T) {
	ts, cfg := startStreamingServer(t)
	u := execURL(ts, "/portForward/default/web")
	spdyTransport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: spdyTransport}, "POST", u)
	tunnel, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]httpstream.Dialer{"spdy": spdyDialer, "websocket": tunnel} {
		t.Run(name, func(t *testing.T) {
			stop, ready := make(chan struct{}), make(chan struct{})
			fw, err := portforward.NewOnAddresses(d, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- fw.ForwardPorts() }()
			defer func() { close(stop); <-done }()
			select {
			case <-ready:
			case <-time.After(deadline):
				t.Fatal("port-forward not ready")
			}
			ports, err := fw.GetPorts()
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local))
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(conn, "ping %d", i)
				conn.SetReadDeadline(time.Now().Add(deadline))
				want := fmt.Sprintf("uid-web:8080 ping %d", i)
				got := make([]byte, len(want))
				if _, err := io.ReadFull(conn, got); err != nil || string(got) != want {
					t.Errorf("connection %d: %q, %v", i, got, err)
				}
				conn.Close()
			}
		})
	}
}
