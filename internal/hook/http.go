package hook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/internal/version"
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
		CheckRedirect: sameHostRedirects,
	}
}

// sameHostRedirects follows redirects on the same host only; a redirect
// elsewhere is the response itself, as upstream.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
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
	req, err := newRequest(ctx, a, c, podIP)
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

// newRequest builds the GET for a as upstream does: host defaults to the pod
// IP, the port may be a name of one of c's ports, headers are sent as given
// and User-Agent and Accept get defaults.
func newRequest(ctx context.Context, a *v1.HTTPGetAction, c *v1.Container, podIP string) (*http.Request, error) {
	scheme := strings.ToLower(string(a.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := a.Host
	if host == "" {
		host = podIP
	}
	if host == "" {
		return nil, errors.New("the pod has no IP to send the hook to")
	}
	port, err := resolvePort(a.Port, c)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(a.Path)
	if err != nil {
		// A path that does not parse is passed on as it is, as upstream.
		u = &url.URL{Path: a.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	headers := make(http.Header)
	for _, h := range a.HTTPHeaders {
		headers.Add(h.Name, h.Value)
	}
	if _, ok := headers["User-Agent"]; !ok {
		headers.Set("User-Agent", userAgent)
	}
	if _, ok := headers["Accept"]; !ok {
		headers.Set("Accept", "*/*")
	} else if headers.Get("Accept") == "" {
		headers.Del("Accept") // set empty: send none
	}
	req.Header = headers
	req.Host = headers.Get("Host")
	return req, nil
}

// resolvePort turns a numeric or named port into a number. A name that is not
// one of c's ports but reads as a number is that number, as upstream.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	port := -1
	switch p.Type {
	case intstr.Int:
		port = p.IntValue()
	case intstr.String:
		n, ok := namedPort(c, p.StrVal)
		if !ok {
			var err error
			if n, err = strconv.Atoi(p.StrVal); err != nil {
				// Upstream reports strconv's error here; a name is clearer.
				return 0, fmt.Errorf("container %q has no port named %q", c.Name, p.StrVal)
			}
		}
		port = n
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("invalid port number: %v", port)
	}
	return port, nil
}

func namedPort(c *v1.Container, name string) (int, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort), true
		}
	}
	return 0, false
}
