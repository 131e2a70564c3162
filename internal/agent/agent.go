// Package agent wires the node agent: node registration and heartbeat, and
// (as they land) the pod source, pod workers, runtime, probes and agent API.
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/config"
	"github.com/podvisor/podvisor/internal/node"
)

// Config is what the agent needs to run.
type Config struct {
	NodeName   string
	HostIP     net.IP
	AgentPort  int
	DataDir    string
	Kubeconfig string // the node's own credentials
	Kubelet    config.Config
	Log        *slog.Logger
}

// Agent is a running node agent.
type Agent struct {
	cfg    Config
	client kubernetes.Interface
	node   *node.Manager
}

// New builds the agent's parts; nothing runs until Start.
func New(cfg Config) (*Agent, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("agent kubeconfig: %w", err)
	}
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	nm, err := node.New(node.Config{
		Name: cfg.NodeName, HostIP: cfg.HostIP, AgentPort: int32(cfg.AgentPort), DataDir: cfg.DataDir,
		MaxPods:               cfg.Kubelet.MaxPods,
		StatusUpdateFrequency: cfg.Kubelet.NodeStatusUpdateFrequency,
		StatusReportFrequency: cfg.Kubelet.NodeStatusReportFrequency,
		LeaseDurationSeconds:  cfg.Kubelet.NodeLeaseDurationSeconds,
		Client:                client, Log: cfg.Log,
	})
	if err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, client: client, node: nm}, nil
}

// Start registers the node and starts the agent's loops; they stop with ctx.
func (a *Agent) Start(ctx context.Context) error {
	if err := a.node.Register(ctx); err != nil {
		return err
	}
	go a.node.Run(ctx)
	return nil
}
