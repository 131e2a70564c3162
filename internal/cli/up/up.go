// Package up runs `podvisor up`: checks the data directory, ports and
// configuration, then starts the control plane and the node agent.
package up

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/podvisor/podvisor/internal/agent"
	"github.com/podvisor/podvisor/internal/agent/config"
	"github.com/podvisor/podvisor/internal/agent/node"
	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/service"
	"github.com/podvisor/podvisor/internal/cluster/etcdsnapshot"
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
	ConfigFile               string
	TerminatedPodGCThreshold int
	EtcdClientPort           int           // 0: as recorded, else 2379 or a free port
	EtcdPeerPort             int           // 0: as recorded, else 2380 or a free port
	NodeMonitorGracePeriod   time.Duration // for tests: how soon a silent node is NotReady
	EvictionMonitoringPeriod time.Duration // for tests: between eviction rounds (0: 10 s)
	GCPeriod                 time.Duration // for tests: between image and container GC rounds (0: 5m and 1m)
	Verbose                  bool          // component logs to stderr as well as the log file
	// ClusterDNS is the node's DNS (--disable-cluster-dns, --cluster-dns-port).
	ClusterDNS ClusterDNSOptions
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
	LocalStorage LocalStorageOptions
	// MetricsServer is the embedded metrics-server (kubectl top).
	MetricsServer MetricsServerOptions
}

// Run starts podvisor and blocks until ctx ends, then stops everything.
// The ready line goes to stdout; a warning about ignored config goes to stderr.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	notify := service.TakeNotifySocket() // before the API server can take it
	kc, ignored, err := config.Load(o.ConfigFile)
	if err != nil {
		return err
	}
	if o.EvictionMonitoringPeriod > 0 {
		kc.EvictionMonitoringPeriod = o.EvictionMonitoringPeriod
	}
	kc.GCPeriod = o.GCPeriod
	podNetwork, err := clusterCIDR(o.ClusterCIDR)
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
	st, err := claimDataDir(dir, o.NodeName)
	if err != nil {
		return err
	}
	if err := checkPort("", o.APIPort, "--api-port"); err != nil {
		return err
	}
	if err := checkPort("", o.AgentPort, "--agent-port"); err != nil {
		return err
	}
	hostIP := node.HostIP()
	if err := checkMetricsServerPort(o.MetricsServer, hostIP); err != nil {
		return err
	}
	if err := saveWithEtcdPorts(&st, dir, o.EtcdClientPort, o.EtcdPeerPort); err != nil {
		return err
	}
	log, logFile, closeLog, err := startLogging(dir, o.Verbose, stderr, o.ConfigFile, ignored)
	if err != nil {
		return err
	}
	defer closeLog()
	snapshots, err := snapshotSchedule(&o.Snapshots, dir, o.NodeName, st.EtcdClientPort, log)
	if err != nil {
		return err
	}

	if kc, err = withClusterDNS(kc, o.ClusterDNS); err != nil {
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
		Kubeconfig: controlplane.NodeKubeconfig(dir), PKIDir: controlplane.PKIDir(dir), Kubelet: kc, Log: log,
		Runtime: runtimeConfig(o.Runtime, kc), ClusterCIDR: podNetwork,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := ag.Start(actx); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	// The admin credentials: the server keeps the kube-dns Service and the
	// RBAC that lets other nodes publish their DNS.
	startClusterDNS(actx, o.ClusterDNS, log, datadir.AdminKubeconfig(dir), o.NodeName, hostIP, kc, dir, true)
	publishLocalStorage(actx, o.LocalStorage, log, datadir.AdminKubeconfig(dir))
	startMetricsServer(actx, o.MetricsServer, log, dir, hostIP)
	startLocalStorage(actx, o.LocalStorage, log, datadir.AdminKubeconfig(dir), o.NodeName, dir)
	adminCfg, err := clientcmd.BuildConfigFromFlags("", datadir.AdminKubeconfig(dir))
	if err != nil {
		return err
	}
	err = waitNodeReady(ctx, adminCfg, o.NodeName)
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
	startServiceProxy(actx, o.DisableServiceProxy, log, controlplane.KubeProxyKubeconfig(dir), o.NodeName, hostIP, podNetwork, routing)
	fmt.Fprintf(stdout, "podvisor is ready: export KUBECONFIG=%s\n", datadir.AdminKubeconfig(dir))
	log.Info("podvisor is ready", "node", o.NodeName, "apiPort", o.APIPort)
	notifyReady(log, notify, "node "+o.NodeName+" is Ready")
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

// checkPort fails with a one-line error when the port cannot be bound.
func checkPort(host string, port int, flag string) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("%s %d is not a valid port", flag, port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		if errors.Is(err, errAddrInUse) || strings.Contains(err.Error(), "address already in use") {
			return fmt.Errorf("port %d (%s) is already in use", port, flag)
		}
		return fmt.Errorf("port %d (%s): %v", port, flag, err)
	}
	return l.Close()
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
			if err := checkPort("127.0.0.1", p, "etcd"); err != nil {
				return fmt.Errorf("etcd port %d recorded in %s is already in use", p, filepath.Join(dir, "podvisor.json"))
			}
		}
		return nil
	}
	if checkPort("127.0.0.1", 2379, "") == nil && checkPort("127.0.0.1", 2380, "") == nil {
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

// setupLogging sends the components' klog output and the agent's slog output
// to the log file (and stderr too when verbose).
func setupLogging(path string, verbose bool, stderr io.Writer) (*slog.Logger, func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("log file: %w", err)
	}
	var w io.Writer = f
	if verbose {
		w = io.MultiWriter(f, stderr)
	}
	klog.LogToStderr(false)
	klog.SetOutput(w)
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)
	return log, func() { klog.Flush(); f.Close() }, nil
}

// waitNodeReady waits for the node to be Ready.
func waitNodeReady(ctx context.Context, rc *rest.Config, name string) error {
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil && nodeIsReady(n) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("node %s did not become Ready within 1m", name)
}

func nodeIsReady(n *v1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}

func init() {
	// klog copies errors to stderr unless told otherwise; podvisor's stderr is
	// for its own one-line messages, the components' logs go to the log file.
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("stderrthreshold", "FATAL")
	_ = fs.Set("logtostderr", "false")
}

// claimDataDir opens dir for node nodeName; a data dir belongs to one node.
func claimDataDir(dir, nodeName string) (datadir.State, error) {
	st, err := datadir.Open(dir)
	if err != nil {
		return st, err
	}
	if st.NodeName != "" && st.NodeName != nodeName {
		return st, fmt.Errorf("data dir %s belongs to node %q, not %q (use another --data-dir)", dir, st.NodeName, nodeName)
	}
	st.NodeName = nodeName
	return st, nil
}

// startLogging opens DIR/podvisor.log for all logs and says, in one line on
// stderr, which configuration fields are ignored.
func startLogging(dir string, verbose bool, stderr io.Writer, configFile string, ignored []string) (*slog.Logger, string, func(), error) {
	logFile := filepath.Join(dir, "podvisor.log")
	log, closeLog, err := setupLogging(logFile, verbose, stderr)
	if err != nil {
		return nil, "", nil, err
	}
	if len(ignored) > 0 {
		fmt.Fprintf(stderr, "podvisor: warning: %s sets fields podvisor does not implement yet (ignored): %s\n",
			configFile, strings.Join(ignored, ", "))
	}
	return log, logFile, closeLog, nil
}
