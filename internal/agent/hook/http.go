package hook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/httpget"
	"github.com/podvisor/podvisor/internal/cli/version"
)

// userAgent is upstream's kube-lifecycle/<major>.<minor>.
var userAgent = func() string {
	parts := strings.SplitN(strings.TrimPrefix(version.Kubernetes, "v"), ".", 3)
	if len(parts) < 2 {
		return "kube-lifecycle"
	}
	return "kube-lifecycle/" + parts[0] + "." + parts[1]
}()

// newHTTPClient is the client for httpGet hooks. It must never carry
// credentials: hooks go to whatever host the pod names.
func newHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			// The agent cannot know a pod's certificate, so, as upstream, it
			// does not verify it. Proxy is nil: hooks never go through HTTP_PROXY.
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			DisableKeepAlives: true,
		},
		CheckRedirect: httpget.SameHostRedirects,
	}
}

func (r *Runner) httpHandler(log *slog.Logger, pod *v1.Pod, c *v1.Container, podIP string, a *v1.HTTPGetAction) handler {
	return handler{
		run: func(ctx context.Context) result {
			return result{err: r.get(ctx, log, c, podIP, a)}
		},
		describe: func(res result) string {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v",
				a.Path, c.Name, podDesc(pod), res.err)
		},
	}
}

// get sends the hook. Any HTTP response counts as success: upstream's
// lifecycle handler, unlike its HTTP probe, never looks at the status code.
func (r *Runner) get(ctx context.Context, log *slog.Logger, c *v1.Container, podIP string, a *v1.HTTPGetAction) error {
	req, err := httpget.NewRequest(ctx, a, c, podIP, userAgent)
	if errors.Is(err, httpget.ErrNoHost) {
		err = errors.New("the pod has no IP to send the hook to")
	}
	if err != nil {
		return err
	}
	resp, err := r.http.Do(req)
	if err == nil {
		resp.Body.Close()
		return nil
	}
	if !gotHTTPResponse(err) {
		return err
	}
	// An HTTPS hook answered in plain HTTP is retried in HTTP, as upstream
	// (kubelets before 1.28 sent every hook in HTTP).
	req = req.Clone(ctx)
	req.URL.Scheme = "http"
	req.Header.Del("Authorization")
	resp, httpErr := r.http.Do(req)
	if httpErr != nil {
		return err
	}
	resp.Body.Close()
	log.Warn("HTTPS lifecycle hook got an HTTP response, retry with HTTP succeeded", "host", req.URL.Host)
	return nil
}

func gotHTTPResponse(err error) bool {
	var urlErr *url.Error
	return errors.As(err, &urlErr) && strings.Contains(urlErr.Err.Error(), "server gave HTTP response to HTTPS client")
}
