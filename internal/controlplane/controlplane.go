// Package controlplane runs the upstream Kubernetes control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) inside the podvisor
// process, with a PKI and kubeconfigs generated once into the data directory.
package controlplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/podvisor/podvisor/internal/cluster/bootstrap"
	"github.com/podvisor/podvisor/internal/cluster/pki"
	"github.com/podvisor/podvisor/internal/cluster/ranges"
)

// nodeCIDRMaskSize: each node gets a /24 of the pod network
// (ranges.DefaultClusterCIDR) from the controller manager.
const nodeCIDRMaskSize = 24

// Config says where and how the control plane runs.
type Config struct {
	DataDir                  string
	APIPort                  int
	NodeName                 string
	HostIP                   net.IP // advertised address; nil when the machine has none
	EtcdClientPort           int
	EtcdPeerPort             int
	TerminatedPodGCThreshold int
	NodeMonitorGracePeriod   time.Duration // 0: the controller manager's default (tests shorten it)
	// ClusterCIDR is the pod network nodes' pod CIDRs are allocated from;
	// empty: ranges.DefaultClusterCIDR.
	ClusterCIDR string
	LogFile     string
	// BindAddress is where the API server listens; empty: 127.0.0.1 (only
	// this machine's agents). podvisor server binds a reachable one.
	BindAddress string
	// SANs are extra names and addresses of the API server's certificate.
	SANs []string
	// SigningDuration is the lifetime of the certificates the controller
	// manager signs (node client and serving certificates); 0: a year.
	SigningDuration time.Duration
	// RestoreSnapshot is an etcd snapshot to restore before etcd starts
	// (--cluster-reset-restore-path); empty: none.
	RestoreSnapshot string
	// SecretsEncryption encrypts Secrets at rest (a key made in the data
	// dir on first use; once made, it is used at every start).
	SecretsEncryption bool
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	cfg    Config
	pki    pki.PKI
	etcd   *embed.Etcd
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errs   chan error
}

// Paths of the files other parts of podvisor use.
func NodeKubeconfig(dataDir string) string {
	return filepath.Join(dataDir, "kubeconfigs", "node.kubeconfig")
}

// KubeProxyKubeconfig holds the service proxy's credentials (system:kube-proxy).
func KubeProxyKubeconfig(dataDir string) string {
	return filepath.Join(dataDir, "kubeconfigs", "kube-proxy.kubeconfig")
}

// MetricsServerKubeconfig holds the embedded metrics-server's credentials
// (system:metrics-server), with which it also scrapes the nodes.
func MetricsServerKubeconfig(dataDir string) string {
	return kubeconfigPath(dataDir, pki.MetricsServer)
}

// MetricsServerServing are the embedded metrics-server's serving
// certificate and key (signed by the cluster CA, named for its Service).
func MetricsServerServing(dataDir string) (crt, key string) {
	p := pki.PKI{Dir: pki.Dir(dataDir)}
	return p.Path(pki.MetricsServerServing + ".crt"), p.Path(pki.MetricsServerServing + ".key")
}

// Prepare creates the PKI and kubeconfigs; it is idempotent.
func Prepare(cfg Config) error {
	p := pki.PKI{Dir: pki.Dir(cfg.DataDir)}
	var ips []net.IP
	var dns []string
	if cfg.HostIP != nil {
		ips = append(ips, cfg.HostIP)
	}
	for _, s := range cfg.SANs {
		if ip := net.ParseIP(s); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, s)
		}
	}
	if err := p.Ensure(cfg.NodeName, ips, dns); err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(localHost(cfg), strconv.Itoa(cfg.APIPort))
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "kubeconfigs"), 0o700); err != nil {
		return err
	}
	// Rewritten at every start: the API port may differ from the last run.
	kubeconfigs := map[string]string{
		pki.AdminKubeconfig(cfg.DataDir):                  "admin",
		kubeconfigPath(cfg.DataDir, "controller-manager"): "controller-manager",
		kubeconfigPath(cfg.DataDir, "scheduler"):          "scheduler",
		MetricsServerKubeconfig(cfg.DataDir):              pki.MetricsServer,
	}
	if cfg.NodeName != "" {
		kubeconfigs[NodeKubeconfig(cfg.DataDir)] = "node"
		kubeconfigs[KubeProxyKubeconfig(cfg.DataDir)] = "kube-proxy"
	}
	for path, stem := range kubeconfigs {
		if err := p.WriteKubeconfig(path, server, stem); err != nil {
			return fmt.Errorf("kubeconfig %s: %w", path, err)
		}
	}
	return nil
}

// localHost is the address this machine's clients use for the API server.
func localHost(cfg Config) string {
	if ip := net.ParseIP(cfg.BindAddress); ip != nil && !ip.IsUnspecified() {
		return ip.String()
	}
	return "127.0.0.1"
}

// PublicServer is the API server's address as joining nodes learn it from
// cluster-info: the advertised address when the server listens beyond
// loopback, else the loopback one.
func PublicServer(cfg Config) string {
	host := localHost(cfg)
	if host == "127.0.0.1" && cfg.BindAddress != "" && cfg.HostIP != nil {
		host = cfg.HostIP.String()
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(cfg.APIPort))
}

func kubeconfigPath(dataDir, name string) string {
	return filepath.Join(dataDir, "kubeconfigs", name+".kubeconfig")
}

// Start runs etcd, then the API server, then the controller manager and the
// scheduler, and returns once the API server answers /readyz.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	// First: a damaged key file stops the start before anything changed.
	encArgs, err := encryptionArgs(cfg)
	if err != nil {
		return nil, err
	}
	if err := Prepare(cfg); err != nil {
		return nil, err
	}
	// Every component applies logging configuration; only the first may change it.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged

	cp := &ControlPlane{cfg: cfg, pki: pki.PKI{Dir: pki.Dir(cfg.DataDir)}, errs: make(chan error, 4)}
	if cfg.RestoreSnapshot != "" {
		if err := restoreEtcd(cfg); err != nil {
			return nil, err
		}
	}
	e, err := startEtcd(cfg.DataDir, cfg.EtcdClientPort, cfg.EtcdPeerPort, cfg.LogFile)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	cp.etcd = e
	if err := checkStoredSecrets(ctx, e, cfg.DataDir); err != nil {
		cp.Stop()
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cp.cancel = cancel

	run, err := runAPIServer(cctx, append(cp.apiserverArgs(), encArgs...))
	if err != nil {
		cp.Stop()
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	cp.goRun("kube-apiserver", run)
	if err := cp.waitReady(ctx); err != nil {
		cp.Stop()
		return nil, err
	}
	admin, err := adminClient(cfg.DataDir)
	if err != nil {
		cp.Stop()
		return nil, err
	}
	if err := ensureRBAC(ctx, admin); err != nil {
		cp.Stop()
		return nil, err
	}
	if err := cp.prepareJoins(cctx, admin); err != nil {
		cp.Stop()
		return nil, fmt.Errorf("join objects: %w", err)
	}
	run, err = runControllerManager(cctx, cp.controllerManagerArgs())
	if err != nil {
		cp.Stop()
		return nil, fmt.Errorf("kube-controller-manager: %w", err)
	}
	cp.goRun("kube-controller-manager", run)
	run, err = runScheduler(cctx, cp.schedulerArgs())
	if err != nil {
		cp.Stop()
		return nil, fmt.Errorf("kube-scheduler: %w", err)
	}
	cp.goRun("kube-scheduler", run)
	return cp, nil
}

// Err reports a component that stopped on its own.
func (cp *ControlPlane) Err() <-chan error { return cp.errs }

func (cp *ControlPlane) goRun(name string, run func() error) {
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		if err := run(); err != nil {
			select {
			case cp.errs <- fmt.Errorf("%s: %w", name, err):
			default:
			}
		}
	}()
}

// Stop cancels the components, waits for them (bounded), then closes etcd.
func (cp *ControlPlane) Stop() {
	if cp.cancel != nil {
		cp.cancel()
	}
	done := make(chan struct{})
	go func() { cp.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
	}
	if cp.etcd != nil {
		cp.etcd.Close()
	}
}

func (cp *ControlPlane) waitReady(ctx context.Context) error {
	rc, err := clientcmd.BuildConfigFromFlags("", pki.AdminKubeconfig(cp.cfg.DataDir))
	if err != nil {
		return err
	}
	rt, err := rest.TransportFor(rc)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: rt, Timeout: 2 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-cp.errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := hc.Get(rc.Host + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("kube-apiserver did not become ready within 2m")
}

func (cp *ControlPlane) apiserverArgs() []string {
	p, c := cp.pki, cp.cfg
	args := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.EtcdClientPort),
		"--bind-address=" + cmp.Or(c.BindAddress, "127.0.0.1"),
		"--secure-port=" + strconv.Itoa(c.APIPort),
		"--client-ca-file=" + p.Path(pki.CACert),
		"--tls-cert-file=" + p.Path(pki.APIServerCert),
		"--tls-private-key-file=" + p.Path(pki.APIServerKey),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.Path(pki.ServiceAccountPub),
		"--service-account-signing-key-file=" + p.Path(pki.ServiceAccountKey),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range=" + ranges.ServiceCIDR,
		"--kubelet-client-certificate=" + p.Path(pki.KubeletClientCert),
		"--kubelet-client-key=" + p.Path(pki.KubeletClientKey),
		"--kubelet-certificate-authority=" + p.Path(pki.CACert),
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--allow-privileged=true",
		"--profiling=false",
		// Nodes join with bootstrap tokens (internal/cluster/bootstrap).
		"--enable-bootstrap-token-auth=true",
		// The aggregation layer (metrics.k8s.io from the embedded
		// metrics-server): the API server proxies with the front-proxy
		// client certificate, which aggregated servers trust through the
		// requestheader CA it publishes (kubeadm's settings); it dials the
		// endpoints of an APIService's Service itself, so no service proxy
		// is needed on the control plane's machine (podvisor server has none).
		"--requestheader-client-ca-file=" + p.Path(pki.FrontProxyCACert),
		"--requestheader-allowed-names=" + pki.FrontProxyClient,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.Path(pki.FrontProxyClient+".crt"),
		"--proxy-client-key-file=" + p.Path(pki.FrontProxyClient+".key"),
		"--enable-aggregator-routing=true",
	}
	if c.HostIP != nil {
		args = append(args, "--advertise-address="+c.HostIP.String())
	} else {
		// No routable address: nothing outside this machine can reach the API anyway.
		args = append(args, "--endpoint-reconciler-type=none", "--advertise-address=10.43.255.254")
	}
	return args
}

func (cp *ControlPlane) controllerManagerArgs() []string {
	p, c := cp.pki, cp.cfg
	kc := kubeconfigPath(c.DataDir, "controller-manager")
	args := []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--secure-port=0",
		"--leader-elect=false",
		"--service-account-private-key-file=" + p.Path(pki.ServiceAccountKey),
		"--root-ca-file=" + p.Path(pki.CACert),
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file=" + p.Path(pki.CACert),
		"--cluster-signing-key-file=" + p.Path(pki.CAKey),
		"--service-cluster-ip-range=" + ranges.ServiceCIDR,
		"--terminated-pod-gc-threshold=" + strconv.Itoa(c.TerminatedPodGCThreshold),
		"--profiling=false",
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + cmp.Or(c.ClusterCIDR, ranges.DefaultClusterCIDR),
		"--node-cidr-mask-size=" + strconv.Itoa(nodeCIDRMaskSize),
		// The bootstrap signer signs cluster-info with each token (token
		// discovery) and the token cleaner deletes expired tokens; both are
		// off by default, as kubeadm turns them on.
		"--controllers=*,bootstrapsigner,tokencleaner",
	}
	if c.SigningDuration > 0 {
		args = append(args, "--cluster-signing-duration="+c.SigningDuration.String())
	}
	if c.NodeMonitorGracePeriod > 0 {
		args = append(args, "--node-monitor-grace-period="+c.NodeMonitorGracePeriod.String())
	}
	return args
}

func (cp *ControlPlane) schedulerArgs() []string {
	kc := kubeconfigPath(cp.cfg.DataDir, "scheduler")
	return []string{
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--secure-port=0",
		"--leader-elect=false",
		"--profiling=false",
	}
}

// prepareJoins publishes cluster-info and the bootstrap bindings (nodes join
// with tokens) and approves nodes' serving certificates.
func (cp *ControlPlane) prepareJoins(ctx context.Context, c kubernetes.Interface) error {
	caPEM, err := os.ReadFile(cp.pki.Path(pki.CACert))
	if err != nil {
		return err
	}
	if err := bootstrap.EnsureClusterObjects(ctx, c, PublicServer(cp.cfg), caPEM); err != nil {
		return err
	}
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		bootstrap.RunServingApprover(ctx, c, slog.Default())
	}()
	return nil
}

// adminClient is a client with the data dir's admin credentials.
func adminClient(dataDir string) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", pki.AdminKubeconfig(dataDir))
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// CAFile is the cluster CA's certificate.
func CAFile(dataDir string) string { return pki.PKI{Dir: pki.Dir(dataDir)}.Path(pki.CACert) }
