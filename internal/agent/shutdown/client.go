package shutdown

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client asks a running agent, over its API, to shut its node down or to
// cancel: what `podvisor node shutdown|cancel` does.
type Client struct {
	url  string
	http *http.Client
}

// NewClient finds the agent of node through the API (its kubelet port) and
// connects to it at host (the agent's own machine: 127.0.0.1) with the
// administrator's certificate of adminKubeconfig.
func NewClient(ctx context.Context, adminKubeconfig, nodeName, host string) (*Client, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", adminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	rc.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", nodeName, err)
	}
	port := n.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port == 0 {
		return nil, fmt.Errorf("node %s reports no agent port: is its agent running?", nodeName)
	}
	tlsCfg, err := rest.TLSConfigFor(rc)
	if err != nil {
		return nil, err
	}
	return &Client{
		url:  "https://" + net.JoinHostPort(host, strconv.Itoa(int(port))) + "/shutdown",
		http: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second},
	}, nil
}

// Shutdown starts a graceful shutdown (as logind's PrepareForShutdown(true)).
func (c *Client) Shutdown(ctx context.Context) (Status, error) {
	return c.do(ctx, http.MethodPost)
}

// Cancel cancels it (as PrepareForShutdown(false)).
func (c *Client) Cancel(ctx context.Context) (Status, error) { return c.do(ctx, http.MethodDelete) }

// Status reports the agent's shutdown state.
func (c *Client) Status(ctx context.Context) (Status, error) { return c.do(ctx, http.MethodGet) }

func (c *Client) do(ctx context.Context, method string) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(ctx, method, c.url, nil)
	if err != nil {
		return st, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return st, fmt.Errorf("agent API: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return st, err
	}
	if resp.StatusCode/100 != 2 {
		return st, fmt.Errorf("agent: %s", strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("agent answered %q: %w", body, err)
	}
	return st, nil
}
