package agentapi

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podvisor/podvisor/internal/agent/logs"
	"github.com/podvisor/podvisor/internal/runtime"
)

// LogSource finds container logs; the agent implements it.
type LogSource interface {
	// LogPath returns the log file of the container's current instance
	// (previous: the one its status shows as lastState, as upstream), and a
	// func that reports whether that instance has exited (for follow to
	// stop). An error of class
	// runtime.ErrNotFound is answered 404 with its text, any other 400 (as
	// the kubelet answers errors getting logs).
	LogPath(namespace, pod, container string, previous bool) (path string, exited func() bool, err error)
}

func (s *Server) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	po, err := parseLogOptions(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	path, exited, err := s.cfg.Logs.LogPath(ns, pod, container, po.Previous)
	if err != nil {
		code := http.StatusBadRequest
		if runtime.IsNotFound(err) {
			code = http.StatusNotFound
		}
		http.Error(w, err.Error(), code)
		return
	}
	opts := logs.FromPodLogOptions(po)
	opts.Exited, opts.Clock = exited, s.cfg.Clock

	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	out := &streamWriter{w: w, flush: po.Follow}
	err = logs.ReadLogs(r.Context(), path, opts, out)
	switch {
	case err == nil || r.Context().Err() != nil:
	case !out.wrote && errors.Is(err, fs.ErrNotExist):
		http.Error(w, fmt.Sprintf("log of container %q in pod %q not found", container, pod), http.StatusNotFound)
	case !out.wrote:
		s.cfg.Log.Error("agent API: reading container log", "namespace", ns, "pod", pod, "container", container, "err", err)
		http.Error(w, fmt.Sprintf("reading log of container %q in pod %q: %v", container, pod, err), http.StatusInternalServerError)
	default:
		// The status is sent: the stream just ends.
		s.cfg.Log.Warn("agent API: container log stream ended", "namespace", ns, "pod", pod, "container", container, "err", err)
	}
}

// streamWriter sends the response as it is written: each write is flushed
// when following, so lines reach the client as they are logged.
type streamWriter struct {
	w     http.ResponseWriter
	flush bool
	wrote bool
}

func (sw *streamWriter) Write(p []byte) (int, error) {
	sw.wrote = true
	n, err := sw.w.Write(p)
	if err == nil && sw.flush {
		err = http.NewResponseController(sw.w).Flush()
	}
	return n, err
}

// parseLogOptions reads the query the kube-apiserver sends, as the kubelet
// does: the v1 conversions of query parameters, then ValidatePodLogOptions's rules.
func parseLogOptions(q url.Values) (*v1.PodLogOptions, error) {
	// "tail" is the old name of tailLines; "all" means no limit, as upstream.
	if tail := q.Get("tail"); tail != "" {
		q.Set("tailLines", tail)
		if tail == "all" {
			q.Del("tailLines")
		}
	}
	o := &v1.PodLogOptions{}
	var errs []error
	param := func(name string, convert func(in *[]string) error) {
		if in, ok := q[name]; ok && len(in) > 0 {
			if err := convert(&in); err != nil {
				errs = append(errs, fmt.Errorf("query parameter %s=%q: %w", name, in[0], err))
			}
		}
	}
	boolean := func(out *bool) func(*[]string) error {
		return func(in *[]string) error { return k8sruntime.Convert_Slice_string_To_bool(in, out, nil) }
	}
	integer := func(out **int64) func(*[]string) error {
		return func(in *[]string) error { return k8sruntime.Convert_Slice_string_To_Pointer_int64(in, out, nil) }
	}
	param("follow", boolean(&o.Follow))
	param("previous", boolean(&o.Previous))
	param("timestamps", boolean(&o.Timestamps))
	param("sinceSeconds", integer(&o.SinceSeconds))
	param("tailLines", integer(&o.TailLines))
	param("limitBytes", integer(&o.LimitBytes))
	param("sinceTime", func(in *[]string) error {
		return metav1.Convert_Slice_string_To_Pointer_v1_Time(in, &o.SinceTime, nil)
	})
	param("stream", func(in *[]string) error {
		o.Stream = &(*in)[0]
		return nil
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid log options: %w", errors.Join(errs...))
	}
	if o.SinceTime != nil && o.SinceTime.IsZero() {
		o.SinceTime = nil // "sinceTime=" is no bound
	}
	if errs := validateLogOptions(o); len(errs) > 0 {
		return nil, fmt.Errorf("invalid log options: %v", errs.ToAggregate())
	}
	return o, nil
}

// validateLogOptions applies the rules of the API's PodLogOptions validation.
func validateLogOptions(o *v1.PodLogOptions) field.ErrorList {
	var errs field.ErrorList
	if o.TailLines != nil && *o.TailLines < 0 {
		errs = append(errs, field.Invalid(field.NewPath("tailLines"), *o.TailLines, "must be greater than or equal to 0"))
	}
	if o.LimitBytes != nil && *o.LimitBytes < 1 {
		errs = append(errs, field.Invalid(field.NewPath("limitBytes"), *o.LimitBytes, "must be greater than 0"))
	}
	switch {
	case o.SinceSeconds != nil && o.SinceTime != nil:
		errs = append(errs, field.Forbidden(field.NewPath(""), "at most one of `sinceTime` or `sinceSeconds` may be specified"))
	case o.SinceSeconds != nil && *o.SinceSeconds < 1:
		errs = append(errs, field.Invalid(field.NewPath("sinceSeconds"), *o.SinceSeconds, "must be greater than 0"))
	}
	if o.Stream != nil {
		switch *o.Stream {
		case v1.LogStreamStdout, v1.LogStreamStderr:
			if o.TailLines != nil {
				errs = append(errs, field.Forbidden(field.NewPath(""), "`tailLines` and specific `stream` are mutually exclusive for now"))
			}
		case v1.LogStreamAll:
		default:
			errs = append(errs, field.NotSupported(field.NewPath("stream"), *o.Stream, []string{v1.LogStreamStdout, v1.LogStreamStderr, v1.LogStreamAll}))
		}
	}
	return errs
}
