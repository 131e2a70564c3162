// Package agent wires the node agent: node registration and heartbeat, the pod
// source, the pod workers, the process runtime, the status manager, events and
// the agent API.
package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/agentapi"
	"github.com/podvisor/podvisor/internal/agent/config"
	"github.com/podvisor/podvisor/internal/agent/eviction"
	"github.com/podvisor/podvisor/internal/agent/hook"
	"github.com/podvisor/podvisor/internal/agent/imagegc"
	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/logrotate"
	"github.com/podvisor/podvisor/internal/agent/node"
	"github.com/podvisor/podvisor/internal/agent/nodestats"
	"github.com/podvisor/podvisor/internal/agent/podcgroup"
	"github.com/podvisor/podvisor/internal/agent/podsecurity"
	"github.com/podvisor/podvisor/internal/agent/podsource"
	"github.com/podvisor/podvisor/internal/agent/podstartup"
	"github.com/podvisor/podvisor/internal/agent/podworker"
	"github.com/podvisor/podvisor/internal/agent/probe"
	"github.com/podvisor/podvisor/internal/agent/shutdown"
	"github.com/podvisor/podvisor/internal/agent/status"
	"github.com/podvisor/podvisor/internal/agent/timeline"
	"github.com/podvisor/podvisor/internal/agent/volume"
	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/containerd"
)

// Config is what the agent needs to run.
type Config struct {
	NodeName   string
	HostIP     net.IP
	AgentPort  int
	DataDir    string
	PKIDir     string
	Kubeconfig string // the node's own credentials
	// RESTConfig, when set, is used instead of Kubeconfig for the agent's
	// own clients (a joined node's rotating client certificate); Kubeconfig
	// still names the same credentials for parts that read a file (podnet).
	RESTConfig *rest.Config
	// ServingCertificate, when set, is the agent API's certificate (a
	// joined node's, rotating) instead of PKIDir/agent-serving.*.
	ServingCertificate func() *tls.Certificate
	Kubelet            config.Config
	Runtime            RuntimeConfig
	Log                *slog.Logger
	// ClusterCIDR is the cluster's pod network: on podvisor's containerd,
	// routes lead to other nodes' pod CIDRs in it and traffic to it is not
	// masqueraded. Invalid: neither.
	ClusterCIDR netip.Prefix
	// Unrouter tells when the node's service proxy stopped routing to a
	// pod (serviceproxy.Routing); nil: pods are stopped without waiting.
	Unrouter podworker.Unrouter
}

// Agent is a running node agent.
type Agent struct {
	cfg         Config
	client      kubernetes.Interface
	eventClient kubernetes.Interface
	node        *node.Manager
	api         *agentapi.Server
	runtime     runtime.Set
	// serveStreams serves the runtime's interactive sessions until ctx
	// ends, when the agent must (the process runtime's); nil: the runtime
	// serves them itself (a CRI runtime).
	serveStreams func(ctx context.Context) error
	containerd   *containerd.Process // when podvisor runs the runtime itself
	stopExits    context.CancelFunc  // ends the watch of containerd's task exits
	cgroups      *podcgroup.Manager  // pod-level cgroups; nil: none
	workers      *podworker.Manager
	probes       *probe.Manager
	status       *status.Manager
	timeline     *timeline.Recorder
	source       *podsource.Source
	events       record.EventBroadcaster
	metrics      *prometheus.Registry
	shutdown     *shutdown.Manager
	eviction     *eviction.Manager
	logRotation  *logrotate.Manager // nil: the runtime cannot reopen logs
	imageGC      *imagegc.Manager   // nil: no images to collect (gc.go)
	recorder     record.EventRecorder
	startup      *podstartup.Tracker
	hostIP       string // the node's address as pods and the runtime see it
	agentDir     string // DATA_DIR/agent
	csi          *csi   // the CSI drivers registered on the node (csi.go)
}

// New builds the agent's parts in the order each needs the ones before it,
// and binds the agent port; nothing runs until Start. Two pairs of parts call
// each other once running (probes report to the workers, the status manager
// reads pods from the source): the Agent's methods probeUpdate and podOf
// carry those calls, so no part is wired in later.
func New(cfg Config) (*Agent, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	a := &Agent{cfg: cfg, hostIP: "127.0.0.1", agentDir: filepath.Join(cfg.DataDir, "agent")}
	if cfg.HostIP != nil {
		a.hostIP = cfg.HostIP.String()
	}
	if err := a.newClients(); err != nil {
		return nil, err
	}
	if err := a.openRuntime(a.agentDir, a.hostIP); err != nil {
		return nil, err
	}
	for _, build := range []func() error{
		a.newNode,        // the Node object (registered by Start)
		a.newEvents,      // events, the pod timeline, the start-up histograms
		a.newStatus,      // publishes pod statuses
		a.newProbes,      // reports probe results to the workers
		a.newCSI,         // CSI driver registration, for the workers' volumes
		a.newWorkers,     // one worker per pod, on the runtime, probes and status
		a.newSource,      // the pods bound to this node, handed to the workers
		a.newShutdown,    // graceful node shutdown
		a.newEviction,    // node-pressure eviction
		a.newLogRotation, // when the runtime can reopen logs
		a.newImageGC,     // when the runtime has images
		a.newAdmission,   // shutdown first, then eviction
		a.newAPI,         // the agent API, bound to its port
	} {
		if err := build(); err != nil {
			a.stopContainerd()
			return nil, err
		}
	}
	return a, nil
}

// newClients makes the agent's API clients.
func (a *Agent) newClients() error {
	rc := a.cfg.RESTConfig
	if rc != nil {
		rc = rest.CopyConfig(rc)
	} else {
		var err error
		if rc, err = clientcmd.BuildConfigFromFlags("", a.cfg.Kubeconfig); err != nil {
			return fmt.Errorf("agent kubeconfig: %w", err)
		}
	}
	// Events get a client of their own so that a burst of them (two or three per
	// container start) never delays a status write; the API server is local and
	// protects itself with priority and fairness, so the agent's own limit is high.
	erc := rest.CopyConfig(rc)
	erc.QPS, erc.Burst = 50, 100
	var err error
	if a.eventClient, err = kubernetes.NewForConfig(erc); err != nil {
		return err
	}
	rc.QPS, rc.Burst = 500, 1000
	a.client, err = kubernetes.NewForConfig(rc)
	return err
}

func (a *Agent) newNode() error {
	k := a.cfg.Kubelet
	var err error
	a.node, err = node.New(node.Config{
		Name: a.cfg.NodeName, HostIP: a.cfg.HostIP, AgentPort: int32(a.cfg.AgentPort), DataDir: a.cfg.DataDir,
		MaxPods:               k.MaxPods,
		StatusUpdateFrequency: k.NodeStatusUpdateFrequency,
		StatusReportFrequency: k.NodeStatusReportFrequency,
		LeaseDurationSeconds:  k.NodeLeaseDurationSeconds,
		HardEviction:          k.Eviction.Thresholds,
		RuntimeVersion:        a.runtimeVersion(),
		VolumesInUse:          func() []v1.UniqueVolumeName { return volume.InUse(filepath.Join(a.agentDir, "pods")) },
		Client:                a.client, Log: a.cfg.Log,
	})
	if err == nil && a.containerd != nil {
		a.node.SetNetworkReadiness(networkPending)
	}
	return err
}

// newEvents makes the event broadcaster and the pod timeline, which records
// every step of a pod to the millisecond: the events the agent emits for it
// and each status it reports; and the kubelet's pod start-up histograms on
// /metrics (podstartup).
func (a *Agent) newEvents() error {
	a.events = record.NewBroadcaster()
	var err error
	a.timeline, err = timeline.New(timeline.Config{Dir: filepath.Join(a.agentDir, "timeline"), Log: a.cfg.Log})
	if err != nil {
		return err
	}
	a.recorder = timeline.Events{
		Next: a.events.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: a.cfg.NodeName}), Rec: a.timeline}
	a.startup = podstartup.New(clock.RealClock{})
	a.metrics = prometheus.NewRegistry()
	a.metrics.MustRegister(a.startup.Collectors()...)
	return nil
}

func (a *Agent) newStatus() error {
	a.status = status.New(a.client, a.podOf, a.cfg.Log)
	a.status.OnWritten = a.startup.StatusWritten
	return nil
}

// podOf is the pod source's copy of a pod, for the status manager (which
// runs only once Start has started the source).
func (a *Agent) podOf(uid types.UID) (*v1.Pod, bool) { return a.source.Get(uid) }

func (a *Agent) newProbes() error {
	var err error
	a.probes, err = probe.New(probe.Config{
		Exec: a.exec, Recorder: a.recorder, Timeline: a.timeline, Log: a.cfg.Log, OnUpdate: a.probeUpdate,
	})
	return err
}

// probeUpdate hands a probe result to the pod's worker (probes run only once
// Start has started the workers).
func (a *Agent) probeUpdate(u probe.Update) {
	a.workers.ProbeUpdate(u.PodUID, u.Container, u.ContainerID, u.State)
}

func (a *Agent) newWorkers() error {
	k := a.cfg.Kubelet
	lc := lifecycle.DefaultConfig()
	lc.MaxBackOff = k.MaxContainerRestartPeriod
	var err error
	a.workers, err = podworker.New(podworker.Config{
		NodeName: a.cfg.NodeName, HostIP: a.hostIP, PodsDir: filepath.Join(a.agentDir, "pods"),
		MaxPods: k.MaxPods, ParallelImagePulls: k.ParallelImagePulls(),
		ImagePullRecordsDir: filepath.Join(a.agentDir, "image_manager"), ImageVerification: k.ImageVerification, Allocatable: a.allocatable, Node: a.getNode,
		Runtime: a.runtime, Prober: a.probes, Hooks: hook.New(hook.Config{Exec: a.exec, Log: a.cfg.Log}),
		Status:    startupStatuses{StatusWriter: &timeline.Statuses{Next: a.status, Rec: a.timeline}, startup: a.startup},
		PullTimes: a.startup, Recorder: a.recorder, Client: a.client,
		Clock: clock.RealClock{}, Lifecycle: lc, Log: a.cfg.Log,
		DNS:      podworker.DNSConfig{ClusterDNS: k.ClusterDNS, ClusterDomain: k.ClusterDomain, ResolvConf: k.ResolvConf},
		Security: podsecurity.Node{SeccompDefault: k.SeccompDefault, SeccompProfileRoot: filepath.Join(a.agentDir, "seccomp")},
		Sysctls:  k.Sysctls,
		Cgroups:  a.podCgroups(),
		Timeline: a.timeline,
		Unrouter: a.cfg.Unrouter,
		CSI:      a.csi.registry, CSIRoot: a.agentDir,
	})
	return err
}

func (a *Agent) newSource() error {
	var err error
	a.source, err = podsource.New(a.client, a.cfg.NodeName, watchedPods{Handler: a.workers, startup: a.startup})
	return err
}

func (a *Agent) newShutdown() error {
	var err error
	a.shutdown, err = shutdown.New(shutdown.Config{
		Bands: shutdown.Bands(a.cfg.Kubelet), Pods: a.workers, Node: a.node, Recorder: a.recorder,
		NodeName: a.cfg.NodeName, StateFile: filepath.Join(a.agentDir, shutdown.StateFileName),
		Metrics: a.metrics, Log: a.cfg.Log,
	})
	return err
}

// host and podMeter measure the node and its pods, for the eviction
// manager and the stats endpoints alike.
func (a *Agent) host() eviction.Host {
	return eviction.Host{DataDir: a.cfg.DataDir, CgroupRoot: "/sys/fs/cgroup"}
}

func (a *Agent) podMeter() eviction.PodMeter {
	return eviction.PodMeter{Containers: a.runtime.Containers, Usage: a.runtime.Stats, PodDir: a.workers.PodDir, PodProcesses: a.podProcesses()}
}

func (a *Agent) newEviction() error {
	k := a.cfg.Kubelet
	var err error
	a.eviction, err = eviction.New(eviction.Config{
		Settings: k.Eviction, Period: k.EvictionMonitoringPeriod,
		LocalStorage: k.LocalStorageCapacityIsolation,
		Observe:      a.host().Observe,
		Stats:        a.podMeter().Stats,
		ActivePods:   a.workers.ActivePods,
		Evict: func(uid types.UID, e eviction.Eviction) <-chan struct{} {
			return a.workers.TerminatePod(uid, podworker.Termination{Grace: e.Grace, Reason: eviction.Reason, Message: e.Message, Condition: e.Condition})
		},
		SetPressure: a.node.SetPressure, QOS: lifecycle.QOSClass,
		Recorder: a.recorder, NodeName: a.cfg.NodeName, Log: a.cfg.Log,
	})
	return err
}

func (a *Agent) newLogRotation() error {
	logs := a.runtime.Logs
	if logs == nil {
		return nil
	}
	k := a.cfg.Kubelet
	var err error
	a.logRotation, err = logrotate.New(logrotate.Config{
		Runtime: struct {
			runtime.Containers
			runtime.LogReopener
		}{a.runtime.Containers, logs},
		Policy:  logrotate.Policy{MaxSize: k.ContainerLogMaxSize, MaxFiles: int(k.ContainerLogMaxFiles)},
		Workers: int(k.ContainerLogMaxWorkers), Interval: k.ContainerLogMonitorInterval,
		Log: a.cfg.Log,
	})
	return err
}

// newAdmission sets the workers' admission chain: a node going down refuses
// every pod with its own reason, before eviction's.
func (a *Agent) newAdmission() error {
	a.workers.SetAdmission(func(pod *v1.Pod) *v1.PodStatus {
		if st := a.shutdown.Admit(pod); st != nil {
			return st
		}
		return a.eviction.Admit(pod)
	})
	return nil
}

// newAPI makes the agent API and binds its port. The stats endpoints show
// the figures the eviction manager acts on.
func (a *Agent) newAPI() error {
	stats := &nodestats.Source{NodeName: a.cfg.NodeName, NodeStart: nodestats.BootTime(), Host: a.host(),
		Pods: a.workers.Pods, Stats: a.podMeter().Stats, Volumes: a.workers.VolumeStats}
	resourceMetrics := prometheus.NewRegistry()
	resourceMetrics.MustRegister(nodestats.ResourceCollector{Summary: stats.CPUAndMemory})
	var err error
	a.api, err = agentapi.New(agentapi.Config{
		Addr:               net.JoinHostPort("", strconv.Itoa(a.cfg.AgentPort)),
		CertFile:           filepath.Join(a.cfg.PKIDir, "agent-serving.crt"),
		KeyFile:            filepath.Join(a.cfg.PKIDir, "agent-serving.key"),
		ServingCertificate: a.cfg.ServingCertificate,
		ClientCAFile:       filepath.Join(a.cfg.PKIDir, "ca.crt"),
		Logs:               a.workers,
		Pods:               a.workers.Pods,
		Streams:            newStreams(a.runtime),
		Metrics:            a.metrics,
		Summary: func(ctx context.Context, onlyCPUAndMemory bool) statsapi.Summary {
			if onlyCPUAndMemory {
				return stats.CPUAndMemory(ctx)
			}
			return stats.Summary(ctx)
		},
		ResourceMetrics: resourceMetrics,
		Shutdown:        a.shutdown.Handler(),
		Timeline:        a.timeline,
		Profiling:       a.cfg.Kubelet.ProfilingHandler,
		// Other users, as the kubelet's webhook authorization: RBAC on nodes/proxy, nodes/log…
		Authorizer: &agentapi.SubjectAccessReviews{Client: a.client, NodeName: a.cfg.NodeName},
		// Bearer tokens (service accounts scraping), as the kubelet's webhook
		// authentication; the Node authorizer lets nodes create TokenReviews.
		TokenReviews: a.client.AuthenticationV1(),
		Log:          a.cfg.Log,
	})
	if err != nil {
		return err
	}
	return a.api.Listen()
}

// getNode reads this node from the API (labels, taints and allocatable for
// admission).
func (a *Agent) getNode() (*v1.Node, error) {
	return a.client.CoreV1().Nodes().Get(context.Background(), a.cfg.NodeName, metav1.GetOptions{})
}

// allocatable is the node's allocatable as the API has it (for the
// downward API's unset limits).
func (a *Agent) allocatable() v1.ResourceList {
	n, err := a.getNode()
	if err != nil {
		return nil
	}
	return n.Status.Allocatable
}

// Start registers the node, re-adopts running containers, starts the pod
// source and cleans up what the API no longer has; the loops stop with ctx.
func (a *Agent) Start(ctx context.Context) error {
	if err := a.node.Register(ctx); err != nil {
		return err
	}
	go a.node.Run(ctx)
	a.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.eventClient.CoreV1().Events("")})
	go func() { <-ctx.Done(); a.events.Shutdown(); a.timeline.Close() }()
	go a.status.Run(ctx, 4)
	go a.probes.Run(ctx)
	go a.eviction.Run(ctx)
	if a.logRotation != nil {
		go a.logRotation.Run(ctx)
	}
	go a.watchContainerd(ctx)
	// Drivers already there register before the workers start.
	a.csi.start(ctx, a.cfg.Log.Warn)
	go func() {
		if err := a.setUpPodNetwork(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Log.Error("pod network", "err", err)
		}
	}()
	if serve := a.serveStreams; serve != nil {
		go func() {
			if err := serve(ctx); err != nil && ctx.Err() == nil {
				a.cfg.Log.Error("exec and port-forward sessions stopped", "err", err)
			}
		}()
	}
	go func() {
		if err := a.api.Run(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Log.Error("agent API stopped", "err", err)
		}
	}()
	if err := a.workers.Start(ctx); err != nil {
		return err
	}
	if err := a.source.Start(ctx); err != nil {
		return err
	}
	// Timelines of pods deleted while the agent was down go.
	a.timeline.Keep(a.source.UIDs())
	// The system bus, or DBUS_SYSTEM_BUS_ADDRESS when set.
	go a.shutdown.WatchLogind(ctx, "")
	// The source has handed over every pod of its first list, so each worker
	// holds its re-adopted containers; what is left is checked against the API.
	if a.cleanupOrphans(ctx) > 0 {
		go a.retryCleanupOrphans(ctx)
	}
	// Garbage collection knows every pod of the node from here on.
	if a.imageGC != nil {
		go a.imageGC.Run(ctx)
	}
	go a.runContainerGC(ctx)
	return nil
}

func (a *Agent) cleanupOrphans(ctx context.Context) (pending int) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return a.workers.CleanupOrphans(cctx)
}

// retryCleanupOrphans goes on while the API cannot confirm that a pod is
// gone, or a gone pod's CSI volumes wait for their driver to register.
func (a *Agent) retryCleanupOrphans(ctx context.Context) {
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		if a.cleanupOrphans(ctx) == 0 {
			return
		}
	}
}

// exec runs a command in a container for probes and hooks, with its combined
// output (bounded); a timeout is of class runtime.ErrTimeout, which the
// probe package recognises.
func (a *Agent) exec(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, int, error) {
	out := &limitedBuffer{max: 10 << 10}
	code, err := a.runtime.Exec.Exec(ctx, id, cmd, out, out, timeout)
	return out.Bytes(), code, err
}

// limitedBuffer keeps the first max bytes written to it; stdout and stderr
// may write concurrently.
type limitedBuffer struct {
	mu sync.Mutex
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.Len(); room > 0 {
		if len(p) > room {
			b.Buffer.Write(p[:room])
		} else {
			b.Buffer.Write(p)
		}
	}
	return len(p), nil
}
