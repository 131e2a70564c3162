package probe

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/podvisor/podvisor/internal/agent/httpget"
)

// httpProber holds the one transport every HTTP probe shares. Keep-alives are
// off, so no connection is reused between probes.
type httpProber struct {
	transport *http.Transport
}

func newHTTPProber() *httpProber {
	return &httpProber{transport: &http.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not check certificates (§6)
		DisableKeepAlives:  true,
		DisableCompression: true, // no Accept-Encoding, as upstream
		Proxy:              nil,  // never the node's proxy
		DialContext:        probeDialer().DialContext,
	}}
}

// httpAction succeeds on 200 ≤ status < 400.
type httpAction struct {
	prober  *httpProber
	req     *http.Request
	timeout time.Duration
}

func (a *httpAction) run(ctx context.Context) outcome {
	client := &http.Client{
		Timeout:       a.timeout,
		Transport:     a.prober.transport,
		CheckRedirect: httpget.SameHostRedirects,
	}
	res, err := client.Do(a.req.WithContext(ctx))
	if err != nil {
		// Connection errors and timeouts are failures, as upstream.
		return outcome{result: resultFailure, output: err.Error()}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxOutput))
	if err != nil {
		return outcome{result: resultFailure, output: err.Error()}
	}
	if res.StatusCode < http.StatusOK || res.StatusCode >= http.StatusBadRequest {
		// Upstream keeps the body out of the message (kubernetes#99425).
		return outcome{result: resultFailure, output: fmt.Sprintf("HTTP probe failed with statuscode: %d", res.StatusCode)}
	}
	if res.StatusCode >= http.StatusMultipleChoices {
		// A redirect not followed (to another host) is a success with a warning.
		return outcome{result: resultWarning, output: "Probe terminated redirects, Response body: " + string(body)}
	}
	return outcome{result: resultSuccess, output: string(body)}
}
