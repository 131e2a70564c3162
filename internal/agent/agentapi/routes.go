package agentapi

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/agent/timeline"
)

// handler routes the kubelet API paths podvisor serves; every path requires
// an authorized client.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	if s.cfg.Pods != nil {
		mux.HandleFunc("GET /pods", s.pods)
	}
	if s.cfg.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Metrics, promhttp.HandlerOpts{
			ErrorLog: slogPrinter{s.cfg.Log},
		}))
	}
	if s.cfg.Summary != nil {
		mux.HandleFunc("GET /stats/summary", s.summary)
	}
	if s.cfg.ResourceMetrics != nil {
		mux.Handle("GET /metrics/resource", promhttp.HandlerFor(s.cfg.ResourceMetrics, promhttp.HandlerOpts{
			ErrorLog: slogPrinter{s.cfg.Log},
		}))
	}
	if s.cfg.Shutdown != nil {
		mux.Handle("/shutdown", s.cfg.Shutdown)
	}
	if s.cfg.Timeline != nil {
		mux.HandleFunc("GET /timeline/{namespace}/{pod}", s.timeline)
		mux.HandleFunc("GET /timeline/{$}", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(s.cfg.Timeline.Summaries())
		})
		mux.Handle("GET /timeline-ui/", timeline.Web())
	}
	if s.cfg.Profiling {
		// The agent's heap, goroutines, CPU and trace, for `kubectl get
		// --raw /api/v1/nodes/NODE/proxy/debug/pprof/heap` and go tool pprof.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	if s.cfg.Streams != nil {
		s.streamingRoutes(mux)
	} else {
		for _, p := range []string{"/exec/", "/attach/", "/portForward/", "/run/"} {
			mux.HandleFunc(p, notImplemented)
		}
	}
	return s.authorize(mux)
}

func (s *Server) pods(w http.ResponseWriter, _ *http.Request) {
	list := v1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: []v1.Pod{}}
	for _, p := range s.cfg.Pods() {
		list.Items = append(list.Items, *p)
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&list); err != nil {
		s.cfg.Log.Debug("agent API: writing /pods", "err", err)
	}
}

// summary serves the kubelet's summary API; ?only_cpu_and_memory=true
// (metrics-server's older query) keeps the CPU and memory figures.
func (s *Server) summary(w http.ResponseWriter, r *http.Request) {
	sum := s.cfg.Summary(r.Context(), r.URL.Query().Get("only_cpu_and_memory") == "true")
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&sum); err != nil {
		s.cfg.Log.Debug("agent API: writing /stats/summary", "err", err)
	}
}

// timeline serves a pod's timeline: JSON, or with ?format=trace Chrome's
// trace event format (Perfetto opens it).
func (s *Server) timeline(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	tl, ok := s.cfg.Timeline.Get(ns, name)
	if !ok {
		http.Error(w, fmt.Sprintf("no timeline of pod %s/%s on this node", ns, name), http.StatusNotFound)
		return
	}
	var body []byte
	var err error
	switch f := r.URL.Query().Get("format"); f {
	case "", "json":
		body, err = json.Marshal(tl)
	case "trace":
		body, err = timeline.Trace(tl)
	default:
		http.Error(w, fmt.Sprintf("unknown format %q: json or trace", f), http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

func notImplemented(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "this agent serves no "+r.URL.Path+": it was started without a runtime for exec, attach, port-forward and run", http.StatusNotImplemented)
}

// slogPrinter lets promhttp report errors through the server's logger.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Error("agent API: metrics", "err", fmt.Sprint(v...)) }
