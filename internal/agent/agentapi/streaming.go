package agentapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	"k8s.io/apimachinery/pkg/util/proxy"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Streams is what exec, attach, port-forward and run need; the agent
// implements it over its runtime.
type Streams interface {
	runtime.Streamer
	// ContainerID is the ID of the running instance of the pod's container,
	// "" when it has none.
	ContainerID(ctx context.Context, podUID types.UID, container string) (string, error)
	// Run runs cmd in a container and returns its combined output; an exit
	// code other than 0 is an error.
	Run(ctx context.Context, containerID string, cmd []string) ([]byte, error)
}

// streamingRoutes serves the interactive endpoints as the kubelet does: the
// runtime gives a URL and the upgraded connection is proxied to it. WebSocket
// clients (kubectl's default, passed through by an API server that knows this
// node declares ExtendWebSocketsToKubelet) are translated to SPDY here.
func (s *Server) streamingRoutes(mux *http.ServeMux) {
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(m+" /exec/{namespace}/{pod}/{container}", s.exec)
		mux.HandleFunc(m+" /exec/{namespace}/{pod}/{uid}/{container}", s.exec)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{container}", s.attach)
		mux.HandleFunc(m+" /attach/{namespace}/{pod}/{uid}/{container}", s.attach)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}", s.portForward)
		mux.HandleFunc(m+" /portForward/{namespace}/{pod}/{uid}", s.portForward)
	}
	mux.HandleFunc("POST /run/{namespace}/{pod}/{container}", s.run)
	mux.HandleFunc("POST /run/{namespace}/{pod}/{uid}/{container}", s.run)
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	s.remoteCommand(w, r, func(id string, o *remotecommandserver.Options) (*url.URL, error) {
		return s.cfg.Streams.GetExec(r.Context(), runtime.ExecRequest{
			ContainerID: id, Cmd: r.URL.Query()["command"],
			Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, TTY: o.TTY,
		})
	})
}

func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	s.remoteCommand(w, r, func(id string, o *remotecommandserver.Options) (*url.URL, error) {
		return s.cfg.Streams.GetAttach(r.Context(), runtime.AttachRequest{
			ContainerID: id, Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, TTY: o.TTY,
		})
	})
}

// remoteCommand serves exec or attach: the streams asked for, the running
// container, the runtime's URL from get, then the proxied session.
func (s *Server) remoteCommand(w http.ResponseWriter, r *http.Request, get func(id string, o *remotecommandserver.Options) (*url.URL, error)) {
	opts, err := remotecommandserver.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id, ok := s.runningContainer(w, r)
	if !ok {
		return
	}
	u, err := get(id, opts)
	if err != nil {
		s.streamError(w, r, err)
		return
	}
	s.proxyRemoteCommand(w, r, u, opts)
}

func (s *Server) proxyRemoteCommand(w http.ResponseWriter, r *http.Request, u *url.URL, opts *remotecommandserver.Options) {
	var h http.Handler = proxy.NewUpgradeAwareHandler(u, nil, false, true, responder{s.cfg.Log})
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		h = translator.NewStreamTranslatorHandler(u, nil, 0, translator.Options{
			Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY,
		})
	}
	h.ServeHTTP(w, r)
}

func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	// A tunneling WebSocket carries SPDY inside: its ports come in the streams.
	tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	opts := &portforward.V4Options{}
	if !tunnel {
		var err error
		if opts, err = portforward.NewV4Options(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	pod := s.findPod(r.PathValue("namespace"), r.PathValue("pod"))
	if pod == nil {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return
	}
	if uid := r.PathValue("uid"); uid != "" && types.UID(uid) != pod.UID {
		http.Error(w, "pod not found", http.StatusNotFound)
		return
	}
	u, err := s.cfg.Streams.GetPortForward(r.Context(), runtime.PortForwardRequest{PodUID: string(pod.UID), Ports: opts.Ports})
	if err != nil {
		s.streamError(w, r, err)
		return
	}
	var h http.Handler = proxy.NewUpgradeAwareHandler(u, nil, false, true, responder{s.cfg.Log})
	if tunnel {
		h = translator.NewTunnelingHandler(h)
	}
	h.ServeHTTP(w, r)
}

func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	id, ok := s.runningContainer(w, r)
	if !ok {
		return
	}
	// "cmd", split at spaces: run's own parameter, as upstream.
	out, err := s.cfg.Streams.Run(r.Context(), id, strings.Split(r.URL.Query().Get("cmd"), " "))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// The kubelet labels the command's output JSON, whatever it is.
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

// runningContainer resolves the path's pod and container to the running
// instance, or answers the request with the kubelet's error.
func (s *Server) runningContainer(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("container")
	pod := s.findPod(r.PathValue("namespace"), r.PathValue("pod"))
	if pod == nil {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return "", false
	}
	var id string
	if uid := r.PathValue("uid"); uid == "" || types.UID(uid) == pod.UID {
		var err error
		if id, err = s.cfg.Streams.ContainerID(r.Context(), pod.UID, name); err != nil {
			s.streamError(w, r, err)
			return "", false
		}
	}
	if id == "" {
		// Also when it is not running (waiting, exited), as the kubelet answers.
		http.Error(w, fmt.Sprintf("container not found (%q)", name), http.StatusInternalServerError)
		return "", false
	}
	return id, true
}

// findPod is the newest pod of that name the agent holds: a pod recreated
// under the same name is the one the client means, not the old one still
// terminating.
func (s *Server) findPod(namespace, name string) *v1.Pod {
	var found *v1.Pod
	for _, p := range s.cfg.Pods() {
		if p.Namespace == namespace && p.Name == name && (found == nil || p.CreationTimestamp.After(found.CreationTimestamp.Time)) {
			found = p
		}
	}
	return found
}

// streamError answers a runtime's refusal before the upgrade: 404 for what
// does not exist, 500 otherwise, with the error's text, as the kubelet does.
func (s *Server) streamError(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	if errors.Is(err, runtime.ErrNotFound) {
		code = http.StatusNotFound
	}
	s.cfg.Log.Info("agent API: stream refused", "path", r.URL.Path, "err", err)
	http.Error(w, err.Error(), code)
}

// responder reports a proxying failure (the runtime's server unreachable).
type responder struct{ log *slog.Logger }

func (p responder) Error(w http.ResponseWriter, r *http.Request, err error) {
	p.log.Error("agent API: proxying a stream", "path", r.URL.Path, "err", err)
	http.Error(w, err.Error(), http.StatusInternalServerError)
}
