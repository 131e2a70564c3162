// Package up runs `podvisor up`: checks the data directory, ports and
// configuration, then starts the control plane and the node agent.
package up

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/agent"
	"github.com/podvisor/podvisor/internal/agent/node"
	"github.com/podvisor/podvisor/internal/cli/agentup"
	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/service"
	"github.com/podvisor/podvisor/internal/cluster/etcdsnapshot"
	"github.com/podvisor/podvisor/internal/cluster/pki"
	"github.com/podvisor/podvisor/internal/cluster/serviceproxy"
	"github.com/podvisor/podvisor/internal/controlplane"
	"github.com/podvisor/podvisor/internal/host/freeport"
)

// Options are the flags of `podvisor up`.
type Options struct {
	DataDir                  string
	APIPort                  int
	AgentPort                int
	NodeName                 string
	TerminatedPodGCThreshold int
	EtcdClientPort           int           // 0: as recorded, else 2379 or a free port
	EtcdPeerPort             int           // 0: as recorded, else 2380 or a free port
	NodeMonitorGracePeriod   time.Duration // for tests: how soon a silent node is NotReady
	Verbose                  bool          // component logs to stderr as well as the log file
	// NodeConfigOptions: --config and the test periods.
	agentup.NodeConfigOptions
	// ClusterDNS is the node's DNS (--disable-cluster-dns, --cluster-dns-port).
	ClusterDNS agentup.ClusterDNSOptions
	// Runtime is the container runtime (--runtime,
	// --container-runtime-endpoint).
	Runtime agent.RuntimeConfig
	// ClusterCIDR is the pod network (--cluster-cidr); empty: 10.42.0.0/16.
	ClusterCIDR string
	// Snapshots are the etcd snapshot schedule and restore flags.
	Snapshots etcdsnapshot.Options
	// DisableServiceProxy leaves Service IPs to a proxy of the user's own
	// (--disable-service-proxy).
	DisableServiceProxy bool
	// SecretsEncryption encrypts Secrets at rest (--secrets-encryption).
	SecretsEncryption bool
	// LocalStorage is the built-in local-path provisioner.
	LocalStorage agentup.LocalStorageOptions
	// MetricsServer is the embedded metrics-server (kubectl top).
	MetricsServer MetricsServerOptions
}

// Run starts podvisor and blocks until ctx ends, then stops everything.
// The ready line goes to stdout; a warning about ignored config goes to stderr.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	notify := service.TakeNotifySocket() // before the API server can take it
	kc, ignored, err := agentup.LoadNodeConfig(o.NodeConfigOptions)
	if err != nil {
		return err
	}
	podNetwork, err := agentup.ClusterCIDR(o.ClusterCIDR)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	if o.NodeName == "" {
		o.NodeName = defaultNodeName()
	}
	st, err := agentup.ClaimDataDir(dir, o.NodeName)
	if err != nil {
		return err
	}
	if err := agentup.CheckPort("", o.APIPort, "--api-port"); err != nil {
		return err
	}
	if err := agentup.CheckPort("", o.AgentPort, "--agent-port"); err != nil {
		return err
	}
	hostIP := node.HostIP()
	if err := checkMetricsServerPort(o.MetricsServer, hostIP); err != nil {
		return err
	}
	if err := saveWithEtcdPorts(&st, dir, o.EtcdClientPort, o.EtcdPeerPort); err != nil {
		return err
	}
	log, logFile, closeLog, err := agentup.StartLogging(dir, o.Verbose, stderr, o.ConfigFile, ignored)
	if err != nil {
		return err
	}
	defer closeLog()
	snapshots, err := snapshotSchedule(&o.Snapshots, dir, o.NodeName, st.EtcdClientPort, log)
	if err != nil {
		return err
	}

	if kc, err = agentup.WithClusterDNS(kc, o.ClusterDNS); err != nil {
		return err
	}
	cp, err := controlplane.Start(ctx, controlplane.Config{
		DataDir: dir, APIPort: o.APIPort, NodeName: o.NodeName, HostIP: hostIP, BindAddress: apiBindAddress(hostIP),
		EtcdClientPort: st.EtcdClientPort, EtcdPeerPort: st.EtcdPeerPort,
		TerminatedPodGCThreshold: o.TerminatedPodGCThreshold, NodeMonitorGracePeriod: o.NodeMonitorGracePeriod, LogFile: logFile,
		ClusterCIDR: o.ClusterCIDR, RestoreSnapshot: o.Snapshots.RestorePath, SecretsEncryption: o.SecretsEncryption,
	})
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	defer cp.Stop()

	actx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	routing := &serviceproxy.Routing{}
	ag, err := agent.New(agent.Config{
		Unrouter: routing,
		NodeName: o.NodeName, HostIP: hostIP, AgentPort: o.AgentPort, DataDir: dir,
		Kubeconfig: controlplane.NodeKubeconfig(dir), PKIDir: pki.Dir(dir), Kubelet: kc, Log: log,
		Runtime: agentup.RuntimeConfig(o.Runtime, kc), ClusterCIDR: podNetwork,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := ag.Start(actx); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	// The admin credentials: the server keeps the kube-dns Service and the
	// RBAC that lets other nodes publish their DNS.
	agentup.StartClusterDNS(actx, o.ClusterDNS, log, datadir.AdminKubeconfig(dir), o.NodeName, hostIP, kc, dir, true)
	agentup.PublishLocalStorage(actx, o.LocalStorage, log, datadir.AdminKubeconfig(dir))
	startMetricsServer(actx, o.MetricsServer, log, dir, hostIP)
	agentup.StartLocalStorage(actx, o.LocalStorage, log, datadir.AdminKubeconfig(dir), o.NodeName, dir)
	adminCfg, err := clientcmd.BuildConfigFromFlags("", datadir.AdminKubeconfig(dir))
	if err != nil {
		return err
	}
	err = agentup.WaitNodeReady(ctx, adminCfg, o.NodeName)
	if err == nil {
		// The first thing a user does is create a pod in "default": that
		// needs the service account the controller manager makes.
		err = waitServiceAccount(ctx, datadir.AdminKubeconfig(dir))
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	agentup.StartServiceProxy(actx, o.DisableServiceProxy, log, controlplane.KubeProxyKubeconfig(dir), o.NodeName, hostIP, podNetwork, routing)
	fmt.Fprintf(stdout, "podvisor is ready: export KUBECONFIG=%s\n", datadir.AdminKubeconfig(dir))
	log.Info("podvisor is ready", "node", o.NodeName, "apiPort", o.APIPort)
	agentup.NotifyReady(log, notify, "node "+o.NodeName+" is Ready")
	runSnapshots(ctx, snapshots)
	runManifests(ctx, dir, log)

	select {
	case <-ctx.Done():
		log.Info("stopping")
		notify.Stopping()
		return nil
	case err := <-cp.Err():
		return fmt.Errorf("control plane stopped: %w", err)
	}
}

// apiBindAddress is where up's API server listens: on every address when
// the machine has one to advertise, because the API server publishes that
// address as the endpoint of the `kubernetes` Service and pods reach it
// there (10.43.0.1:443 is DNATed to it); on loopback only otherwise.
func apiBindAddress(hostIP net.IP) string {
	if hostIP == nil {
		return "127.0.0.1"
	}
	return "0.0.0.0"
}

func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "podvisor"
	}
	return strings.ToLower(h)
}

// saveWithEtcdPorts records etcd's ports (the flags', else as before, else
// picked) in the data dir's state.
func saveWithEtcdPorts(st *datadir.State, dir string, client, peer int) error {
	if client != 0 || peer != 0 {
		if client == 0 || peer == 0 {
			return fmt.Errorf("--etcd-client-port and --etcd-peer-port go together")
		}
		st.EtcdClientPort, st.EtcdPeerPort = client, peer
	}
	if err := pickEtcdPorts(st, dir); err != nil {
		return err
	}
	if err := datadir.Save(dir, *st); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	return nil
}

// pickEtcdPorts keeps the ports of an earlier run, else prefers etcd's usual
// 2379/2380 and falls back to free ones.
func pickEtcdPorts(st *datadir.State, dir string) error {
	if st.EtcdClientPort != 0 {
		for _, p := range []int{st.EtcdClientPort, st.EtcdPeerPort} {
			if err := agentup.CheckPort("127.0.0.1", p, "etcd"); err != nil {
				return fmt.Errorf("etcd port %d recorded in %s is already in use", p, filepath.Join(dir, "podvisor.json"))
			}
		}
		return nil
	}
	if agentup.CheckPort("127.0.0.1", 2379, "") == nil && agentup.CheckPort("127.0.0.1", 2380, "") == nil {
		st.EtcdClientPort, st.EtcdPeerPort = 2379, 2380
		return nil
	}
	var err error
	if st.EtcdClientPort, err = freeport.Pick(); err != nil {
		return err
	}
	st.EtcdPeerPort, err = freeport.Pick()
	return err
}
