package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/podvisor/podvisor/internal/agent"
	"github.com/podvisor/podvisor/internal/config"
	"github.com/podvisor/podvisor/internal/controlplane"
	"github.com/podvisor/podvisor/internal/datadir"
	"github.com/podvisor/podvisor/internal/node"
)

// AgentOptions are the flags of `podvisor agent`: a second node agent on this
// machine joining a running `podvisor up`. It is a local, testing join mode
// (it signs its own certificates with the server's CA key); joining from
// another machine with a kubeconfig is not implemented yet.
type AgentOptions struct {
	ServerDataDir string // data dir of the running podvisor up
	DataDir       string // this agent's own data dir
	NodeName      string
	AgentPort     int
	ConfigFile    string
	Verbose       bool
	// EvictionMonitoringPeriod is for tests: between eviction rounds (0: 10 s).
	EvictionMonitoringPeriod time.Duration
	Runtime                  agent.RuntimeConfig
	// ClusterCIDR is the cluster's pod network (--cluster-cidr, as the
	// server's); empty: 10.42.0.0/16.
	ClusterCIDR string
}

// RunAgent issues the agent's credentials, starts it and blocks until ctx
// ends. The ready line goes to stdout once the node is registered.
func RunAgent(ctx context.Context, o AgentOptions, stdout, stderr io.Writer) error {
	if o.ServerDataDir == "" || o.NodeName == "" || o.DataDir == "" {
		return errors.New("agent: --server-data-dir, --node-name and --data-dir are required")
	}
	kc, ignored, err := config.Load(o.ConfigFile)
	if err != nil {
		return err
	}
	if o.EvictionMonitoringPeriod > 0 {
		kc.EvictionMonitoringPeriod = o.EvictionMonitoringPeriod
	}
	podNetwork, err := clusterCIDR(o.ClusterCIDR)
	if err != nil {
		return err
	}
	server, err := filepath.Abs(o.ServerDataDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(datadir.AdminKubeconfig(server)); err != nil {
		return fmt.Errorf("--server-data-dir %s: no admin.kubeconfig: is it the data dir of a podvisor up?", server)
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	if dir == server {
		return errors.New("agent: --data-dir must differ from --server-data-dir")
	}
	st, err := claimDataDir(dir, o.NodeName)
	if err != nil {
		return err
	}
	if err := checkPort("", o.AgentPort, "--agent-port"); err != nil {
		return err
	}
	if err := datadir.Save(dir, st); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	log, _, closeLog, err := startLogging(dir, o.Verbose, stderr, o.ConfigFile, ignored)
	if err != nil {
		return err
	}
	defer closeLog()
	hostIP := node.HostIP()
	var ips []net.IP
	if hostIP != nil {
		ips = append(ips, hostIP)
	}
	pki := filepath.Join(dir, "pki")
	kubeconfig := filepath.Join(dir, "node.kubeconfig")
	if err := controlplane.JoinLocal(server, pki, kubeconfig, o.NodeName, ips); err != nil {
		return fmt.Errorf("agent credentials: %w", err)
	}
	ag, err := agent.New(agent.Config{
		NodeName: o.NodeName, HostIP: hostIP, AgentPort: o.AgentPort, DataDir: dir,
		Kubeconfig: kubeconfig, PKIDir: pki, Kubelet: kc, Log: log,
		Runtime: runtimeConfig(o.Runtime, kc), ClusterCIDR: podNetwork,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := ag.Start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("agent: %w", err)
	}
	if err := waitNodeReady(ctx, datadir.AdminKubeconfig(server), o.NodeName); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Fprintf(stdout, "podvisor agent is ready: node %s\n", o.NodeName)
	log.Info("podvisor agent is ready", "node", o.NodeName, "server", server)
	<-ctx.Done()
	log.Info("stopping")
	return nil
}

// runtimeConfig: the flag's endpoint, else the config file's.
func runtimeConfig(rc agent.RuntimeConfig, kc config.Config) agent.RuntimeConfig {
	if rc.Endpoint == "" {
		rc.Endpoint = kc.ContainerRuntimeEndpoint
	}
	return rc
}
