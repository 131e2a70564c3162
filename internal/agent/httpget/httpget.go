// Package httpget builds the GET request of an httpGet action, which probes
// and lifecycle hooks share: scheme, host (the pod IP by default), port (a
// number or the name of one of the container's ports), path and headers, with
// upstream's defaults for User-Agent and Accept.
package httpget

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ErrNoHost: the action names no host and the pod has no IP.
var ErrNoHost = errors.New("the action sets no host and the pod has no IP")

// NewRequest builds the request of a.
func NewRequest(ctx context.Context, a *v1.HTTPGetAction, c *v1.Container, podIP, userAgent string) (*http.Request, error) {
	scheme := strings.ToLower(string(a.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := a.Host
	if host == "" {
		host = podIP
	}
	if host == "" {
		return nil, ErrNoHost
	}
	port, err := ResolvePort(a.Port, c)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(a.Path)
	if err != nil {
		// Too late to reject a bad path: send it as written, as upstream.
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
		headers.Del("Accept") // an empty Accept removes it, as upstream
	}
	req.Header = headers
	req.Host = headers.Get("Host")
	return req, nil
}

// ResolvePort turns a port (a number, or the name of one of c's ports) into a
// number. A name that is not found may still be a number written as a string,
// as upstream.
func ResolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	var port int
	switch p.Type {
	case intstr.Int:
		port = p.IntValue()
	case intstr.String:
		found := false
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port, found = int(cp.ContainerPort), true
				break
			}
		}
		if !found {
			n, err := strconv.Atoi(p.StrVal)
			if err != nil {
				return 0, fmt.Errorf("port %q not found in the ports of container %q", p.StrVal, c.Name)
			}
			port = n
		}
	default:
		return 0, fmt.Errorf("invalid port %v", p)
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("invalid port number: %d", port)
	}
	return port, nil
}

// SameHostRedirects is an http.Client's CheckRedirect for probes and hooks:
// redirects to the request's own host (any port) are followed, up to 10; one
// to another host is handed back as the response itself, as upstream.
func SameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}
