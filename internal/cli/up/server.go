package up

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/agent/node"
	"github.com/podvisor/podvisor/internal/cli/agentup"
	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/service"
	"github.com/podvisor/podvisor/internal/cluster/etcdsnapshot"
	"github.com/podvisor/podvisor/internal/controlplane"
)

// ServerOptions are the flags of `podvisor server`: the control plane
// alone, for nodes that join it with a token.
type ServerOptions struct {
	DataDir                  string
	APIPort                  int
	BindAddress              string   // where the API listens (default 0.0.0.0)
	AdvertiseAddress         string   // the address nodes and pods use; default: this machine's
	SANs                     []string // more names and addresses for the API's certificate
	ClusterCIDR              string
	TerminatedPodGCThreshold int
	EtcdClientPort           int
	EtcdPeerPort             int
	NodeMonitorGracePeriod   time.Duration
	SigningDuration          time.Duration // node certificates' lifetime (tests shorten it)
	SecretsEncryption        bool          // encrypt Secrets at rest
	Verbose                  bool
	Snapshots                etcdsnapshot.Options
	// ClusterDNS: the server makes the kube-dns Service unless disabled.
	ClusterDNS agentup.ClusterDNSOptions
	// LocalStorage: the server makes the local-path StorageClass unless
	// disabled (the nodes provision).
	LocalStorage agentup.LocalStorageOptions
	// MetricsServer: the server runs the cluster's metrics-server, which
	// scrapes every node.
	MetricsServer MetricsServerOptions
}

// RunServer starts the control plane and blocks until ctx ends.
func RunServer(ctx context.Context, o ServerOptions, stdout, stderr io.Writer) error {
	notify := service.TakeNotifySocket() // before the API server can take it
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	st, err := datadir.Open(dir)
	if err != nil {
		return err
	}
	if st.NodeName != "" {
		return fmt.Errorf("data dir %s is node %q's ('podvisor up' or 'agent'): podvisor server needs a data dir of its own", dir, st.NodeName)
	}
	bind := o.BindAddress
	if bind == "" {
		bind = "0.0.0.0"
	}
	if net.ParseIP(bind) == nil {
		return fmt.Errorf("--bind-address %q is not an IP address", bind)
	}
	advertise := node.HostIP()
	if o.AdvertiseAddress != "" {
		if advertise = net.ParseIP(o.AdvertiseAddress); advertise == nil {
			return fmt.Errorf("--advertise-address %q is not an IP address", o.AdvertiseAddress)
		}
	} else if ip := net.ParseIP(bind); !ip.IsUnspecified() {
		advertise = ip
	}
	if advertise == nil {
		return fmt.Errorf("no address to advertise: this machine has no default route; give --advertise-address")
	}
	if err := agentup.CheckPort(bind, o.APIPort, "--api-port"); err != nil {
		return err
	}
	if err := checkMetricsServerPort(o.MetricsServer, advertise); err != nil {
		return err
	}
	if err := saveWithEtcdPorts(&st, dir, o.EtcdClientPort, o.EtcdPeerPort); err != nil {
		return err
	}
	log, logFile, closeLog, err := agentup.StartLogging(dir, o.Verbose, stderr, "", nil)
	if err != nil {
		return err
	}
	defer closeLog()
	// A server has no node: its snapshots carry the machine's name, as k3s's.
	snapshots, err := snapshotSchedule(&o.Snapshots, dir, defaultNodeName(), st.EtcdClientPort, log)
	if err != nil {
		return err
	}
	cfg := controlplane.Config{
		DataDir: dir, APIPort: o.APIPort, HostIP: advertise, BindAddress: bind, SANs: o.SANs,
		EtcdClientPort: st.EtcdClientPort, EtcdPeerPort: st.EtcdPeerPort,
		TerminatedPodGCThreshold: o.TerminatedPodGCThreshold, NodeMonitorGracePeriod: o.NodeMonitorGracePeriod,
		ClusterCIDR: o.ClusterCIDR, SigningDuration: o.SigningDuration, LogFile: logFile,
		RestoreSnapshot:   o.Snapshots.RestorePath,
		SecretsEncryption: o.SecretsEncryption,
	}
	cp, err := controlplane.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	defer cp.Stop()
	if err := waitServiceAccount(ctx, datadir.AdminKubeconfig(dir)); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	agentup.PublishClusterDNS(ctx, o.ClusterDNS, log, datadir.AdminKubeconfig(dir))
	agentup.PublishLocalStorage(ctx, o.LocalStorage, log, datadir.AdminKubeconfig(dir))
	startMetricsServer(ctx, o.MetricsServer, log, dir, advertise)
	fmt.Fprintf(stdout, "podvisor server is ready: export KUBECONFIG=%s\n", datadir.AdminKubeconfig(dir))
	log.Info("podvisor server is ready", "server", controlplane.PublicServer(cfg))
	agentup.NotifyReady(log, notify, "control plane is ready")
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

// waitServiceAccount waits for default/default, which the controller
// manager makes: the first pod a user creates needs it.
func waitServiceAccount(ctx context.Context, kubeconfig string) error {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the controller manager made no default service account within 1m")
}
