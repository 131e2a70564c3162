// Package agentapi is the agent's HTTPS API on the kubelet port: the subset
// of the kubelet API the kube-apiserver calls (container logs, exec, attach,
// port-forward, run, health, metrics, pods, stats), for clients with a
// certificate of the cluster CA or, as the kubelet's webhook authentication,
// a bearer token the API server's TokenReview accepts.
package agentapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/disconnect"
	"github.com/podvisor/podvisor/internal/agent/timeline"
)

// DefaultAddr is the kubelet's port.
const DefaultAddr = ":10250"

// Config is what the server needs.
type Config struct {
	Addr     string // host:port; empty means DefaultAddr
	CertFile string // serving certificate (PEM), e.g. <pki>/agent-serving.crt
	KeyFile  string // its key, e.g. <pki>/agent-serving.key
	// ServingCertificate, instead of CertFile and KeyFile, gives the
	// current serving certificate at each handshake (a rotating one); nil
	// while there is none yet (its CSR awaits approval).
	ServingCertificate func() *tls.Certificate
	ClientCAFile       string // CA that client certificates must chain to, e.g. <pki>/ca.crt
	Logs               LogSource
	Pods               func() []*v1.Pod     // optional: serves /pods; required with Streams
	Streams            Streams              // optional: serves /exec, /attach, /portForward and /run
	Metrics            *prometheus.Registry // optional: serves /metrics
	// Summary, optional, serves /stats/summary (the kubelet's summary API,
	// internal/agent/nodestats), ResourceMetrics /metrics/resource.
	Summary         func(ctx context.Context, onlyCPUAndMemory bool) statsapi.Summary
	ResourceMetrics prometheus.Gatherer
	Shutdown        http.Handler // optional: serves /shutdown (graceful node shutdown: GET, POST, DELETE)
	// Timeline, optional, serves /timeline/ (the pods that have one),
	// /timeline/{namespace}/{pod} (a pod's lifecycle to the millisecond:
	// JSON, or ?format=trace for Chrome's trace event format) and the page
	// at /timeline-ui/.
	Timeline Timelines
	// Profiling serves Go's runtime profiles under /debug/pprof/, as the
	// kubelet's profiling handler (enableProfilingHandler).
	Profiling bool
	Clock     clock.Clock // optional: "now" for sinceSeconds
	// TokenReviews, optional, authenticates requests without a client
	// certificate by their bearer token (a TokenReview, answers cached
	// TokenCacheTTL as the kubelet's webhook authentication); without it
	// only client certificates are admitted.
	TokenReviews authenticationclient.AuthenticationV1Interface
	// Authorizer, optional, decides for identities other than the API
	// server's and system:masters (refused without one).
	Authorizer Authorizer
	Log        *slog.Logger
}

// Timelines is what the agent keeps of its pods' lifecycles (timeline.Recorder).
type Timelines interface {
	Get(namespace, name string) (timeline.Timeline, bool)
	Summaries() []timeline.Summary
}

// Server serves the agent API. Listen (optional) then Run, once, from one goroutine.
type Server struct {
	cfg   Config
	tls   *tls.Config
	authn authenticator.Request
	ln    net.Listener
}

// New checks cfg and loads the certificates it names.
func New(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	switch {
	case cfg.ServingCertificate == nil && (cfg.CertFile == "" || cfg.KeyFile == ""):
		return nil, errors.New("agent API: serving certificate and key are required")
	case cfg.ClientCAFile == "":
		return nil, errors.New("agent API: client CA file is required")
	case cfg.Logs == nil:
		return nil, errors.New("agent API: a log source is required")
	case cfg.Streams != nil && cfg.Pods == nil:
		return nil, errors.New("agent API: streams need the pods to find containers in")
	}
	getCert := cfg.ServingCertificate
	if getCert == nil {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("agent API: serving certificate: %w", err)
		}
		getCert = func() *tls.Certificate { return &cert }
	}
	caPEM, err := os.ReadFile(cfg.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("agent API: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("agent API: client CA: no certificate in %s", cfg.ClientCAFile)
	}
	authn, err := newAuthenticator(caPEM, cfg.TokenReviews)
	if err != nil {
		return nil, fmt.Errorf("agent API: %w", err)
	}
	return &Server{cfg: cfg, authn: authn, tls: &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := getCert(); c != nil {
				return c, nil
			}
			return nil, errors.New("no serving certificate yet: the node's kubelet-serving CSR awaits approval")
		},
		// As the kubelet: a certificate is asked for (and verified when
		// given) but a bearer token may stand in for it.
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  pool,
	}}, nil
}

// Listen binds the address, so that a port in use is reported before Run.
// The error wraps the system's (errors.Is(err, syscall.EADDRINUSE)).
func (s *Server) Listen() error {
	if s.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("agent API: %w", err)
	}
	// Exec sessions end with the client's connection, also once upgraded.
	s.ln = disconnect.Listener(ln)
	return nil
}

// Addr is the bound address, nil before Listen.
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// shutdownGrace bounds how long Run waits for requests in flight once ctx is done.
const shutdownGrace = 5 * time.Second

// Run serves until ctx is cancelled, then shuts down gracefully: requests in
// flight (followed logs included, their contexts derive from ctx) end first.
// It listens first if Listen was not called.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           s.handler(),
		TLSConfig:         s.tls,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       disconnect.ConnContext,
		// TLS handshake failures (a client without a certificate) are routine.
		ErrorLog: slog.NewLogLogger(s.cfg.Log.Handler(), slog.LevelDebug),
	}
	s.cfg.Log.Info("agent API listening", "addr", s.ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(s.ln, "", "") }()
	select {
	case err := <-served:
		return fmt.Errorf("agent API: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.cfg.Log.Warn("agent API: requests still running at shutdown", "err", err)
		srv.Close()
	}
	<-served
	return nil
}
