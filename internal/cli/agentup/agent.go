// Package agentup runs `podvisor agent`: a node agent that joins a cluster,
// with the node's services (cluster DNS, local-path provisioner, service
// proxy). `podvisor up` starts the same node parts beside its control plane
// through this package's exported functions. It links no control plane, so
// an agent-only binary (cmd/podvisor-agent) can be built from it.
package agentup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/agent"
	"github.com/podvisor/podvisor/internal/agent/config"
	"github.com/podvisor/podvisor/internal/agent/node"
	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/service"
	"github.com/podvisor/podvisor/internal/cluster/pki"
	"github.com/podvisor/podvisor/internal/cluster/serviceproxy"
)

// AgentOptions are the flags of `podvisor agent`: a node agent joining a
// cluster. It joins in one of three ways: with a bootstrap token (Server,
// Token, CAHashes: the kubelet's TLS bootstrap, from any machine, to any
// cluster that takes bootstrap tokens), with a kubeconfig made elsewhere
// (Kubeconfig), or, for tests on one machine, by signing its own
// certificates with a local `podvisor up`'s CA key (ServerDataDir).
type AgentOptions struct {
	Server        string   // https://HOST:PORT of the API server
	Token         string   // bootstrap token, ID.SECRET
	CAHashes      []string // sha256:… pins of the cluster CA
	Kubeconfig    string   // credentials made elsewhere
	ServerDataDir string   // data dir of a running podvisor up on this machine
	DataDir       string   // this agent's own data dir
	NodeName      string
	NodeIP        string // the node's address; default: the default route's interface's
	AgentPort     int
	Verbose       bool
	// NodeConfigOptions: --config and the test periods.
	NodeConfigOptions
	// ClusterDNS is the node's DNS (--disable-cluster-dns, --cluster-dns-port).
	ClusterDNS ClusterDNSOptions
	Runtime    agent.RuntimeConfig
	// ClusterCIDR is the cluster's pod network (--cluster-cidr, as the
	// server's); empty: 10.42.0.0/16.
	ClusterCIDR string
	// DisableServiceProxy: see Options.
	DisableServiceProxy bool
	// LocalStorage: this node's local-path provisioner.
	LocalStorage LocalStorageOptions
}

// RunAgentUntilSignal runs the agent on the process's stdout and stderr
// until SIGINT or SIGTERM: `podvisor agent` and podvisor-agent alike.
func RunAgentUntilSignal(o AgentOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return RunAgent(ctx, o, os.Stdout, os.Stderr)
}

// RunAgent joins, starts the agent and blocks until ctx ends. The ready line
// goes to stdout once the node is Ready.
func RunAgent(ctx context.Context, o AgentOptions, stdout, stderr io.Writer) error {
	notify := service.TakeNotifySocket() // only podvisor reports, as in up
	modes := 0
	for _, set := range []bool{o.Server != "", o.Kubeconfig != "", o.ServerDataDir != ""} {
		if set {
			modes++
		}
	}
	if modes != 1 {
		return errors.New("agent: give one of --server (with --token), --kubeconfig or --server-data-dir")
	}
	if o.NodeName == "" || o.DataDir == "" {
		return errors.New("agent: --node-name and --data-dir are required")
	}
	kc, ignored, err := LoadNodeConfig(o.NodeConfigOptions)
	if err != nil {
		return err
	}
	if kc, err = WithClusterDNS(kc, o.ClusterDNS); err != nil {
		return err
	}
	podNetwork, err := ClusterCIDR(o.ClusterCIDR)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	var server string
	if o.ServerDataDir != "" {
		if server, err = filepath.Abs(o.ServerDataDir); err != nil {
			return err
		}
		if _, err := os.Stat(datadir.AdminKubeconfig(server)); err != nil {
			return fmt.Errorf("--server-data-dir %s: no admin.kubeconfig: is it the data dir of a podvisor up?", server)
		}
		if dir == server {
			return errors.New("agent: --data-dir must differ from --server-data-dir")
		}
	}
	hostIP := node.HostIP()
	if o.NodeIP != "" {
		if hostIP = net.ParseIP(o.NodeIP); hostIP == nil {
			return fmt.Errorf("--node-ip %q is not an IP address", o.NodeIP)
		}
	}
	st, err := ClaimDataDir(dir, o.NodeName)
	if err != nil {
		return err
	}
	if err := CheckPort("", o.AgentPort, "--agent-port"); err != nil {
		return err
	}
	if err := datadir.Save(dir, st); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	log, _, closeLog, err := StartLogging(dir, o.Verbose, stderr, o.ConfigFile, ignored)
	if err != nil {
		return err
	}
	defer closeLog()
	exe, _ := os.Executable()
	log.Info("podvisor agent starting", "binary", exe, "agentOnly", filepath.Base(exe) == BinaryName)
	var ips []net.IP
	if hostIP != nil {
		ips = append(ips, hostIP)
	}
	var creds credentials
	switch {
	case o.ServerDataDir != "":
		pkiDir := pki.Dir(dir)
		kubeconfig := filepath.Join(dir, "node.kubeconfig")
		if err := pki.JoinLocal(server, pkiDir, kubeconfig, o.NodeName, ips); err != nil {
			return fmt.Errorf("agent credentials: %w", err)
		}
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return err
		}
		creds = credentials{rest: rc, kubeconfig: kubeconfig, pkiDir: pkiDir, server: server}
	case o.Server != "":
		if creds, err = joinWithToken(ctx, o, dir, ips, stderr); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	default:
		if creds, err = joinWithKubeconfig(ctx, o, dir, ips); err != nil {
			return err
		}
	}
	routing := &serviceproxy.Routing{}
	ag, err := agent.New(agent.Config{
		Unrouter: routing,
		NodeName: o.NodeName, HostIP: hostIP, AgentPort: o.AgentPort, DataDir: dir,
		Kubeconfig: creds.kubeconfig, RESTConfig: creds.rest, PKIDir: creds.pkiDir, ServingCertificate: creds.serving,
		Kubelet: kc, Log: log, Runtime: RuntimeConfig(o.Runtime, kc), ClusterCIDR: podNetwork,
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
	StartClusterDNS(ctx, o.ClusterDNS, log, creds.kubeconfig, o.NodeName, hostIP, kc, dir, false)
	StartLocalStorage(ctx, o.LocalStorage, log, creds.kubeconfig, o.NodeName, dir)
	if err := WaitNodeReady(ctx, creds.rest, o.NodeName); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	StartServiceProxy(ctx, o.DisableServiceProxy, log, creds.kubeconfig, o.NodeName, hostIP, podNetwork, routing)
	fmt.Fprintf(stdout, "podvisor agent is ready: node %s\n", o.NodeName)
	log.Info("podvisor agent is ready", "node", o.NodeName, "server", creds.server)
	NotifyReady(log, notify, "node "+o.NodeName+" is Ready")
	<-ctx.Done()
	log.Info("stopping")
	notify.Stopping()
	return nil
}

// RuntimeConfig: the flag's endpoint, else the config file's.
func RuntimeConfig(rc agent.RuntimeConfig, kc config.Config) agent.RuntimeConfig {
	if rc.Endpoint == "" {
		rc.Endpoint = kc.ContainerRuntimeEndpoint
	}
	return rc
}
