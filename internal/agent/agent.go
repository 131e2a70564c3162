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
}

// New builds the agent's parts and binds the agent port; nothing runs until Start.
func New(cfg Config) (*Agent, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	rc := cfg.RESTConfig
	if rc != nil {
		rc = rest.CopyConfig(rc)
	} else {
		var err error
		if rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("agent kubeconfig: %w", err)
		}
	}
	// Events get a client of their own so that a burst of them (two or three per
	// container start) never delays a status write; the API server is local and
	// protects itself with priority and fairness, so the agent's own limit is high.
	erc := rest.CopyConfig(rc)
	erc.QPS, erc.Burst = 50, 100
	eventClient, err := kubernetes.NewForConfig(erc)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, client: client, eventClient: eventClient}
	hostIP := "127.0.0.1"
	if cfg.HostIP != nil {
		hostIP = cfg.HostIP.String()
	}
	agentDir := filepath.Join(cfg.DataDir, "agent")
	if err := a.openRuntime(agentDir, hostIP); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			a.stopContainerd()
		}
	}()
	a.node, err = node.New(node.Config{
		Name: cfg.NodeName, HostIP: cfg.HostIP, AgentPort: int32(cfg.AgentPort), DataDir: cfg.DataDir,
		MaxPods:               cfg.Kubelet.MaxPods,
		StatusUpdateFrequency: cfg.Kubelet.NodeStatusUpdateFrequency,
		StatusReportFrequency: cfg.Kubelet.NodeStatusReportFrequency,
		LeaseDurationSeconds:  cfg.Kubelet.NodeLeaseDurationSeconds,
		HardEviction:          cfg.Kubelet.Eviction.Thresholds,
		RuntimeVersion:        a.runtimeVersion(),
		Client:                client, Log: cfg.Log,
	})
	if err != nil {
		return nil, err
	}
	if a.containerd != nil {
		a.node.SetNetworkReadiness(networkPending)
	}

	a.events = record.NewBroadcaster()
	// Every step of a pod, to the millisecond: the events the agent emits
	// for it and each status it reports (timeline package).
	a.timeline, err = timeline.New(timeline.Config{Dir: filepath.Join(agentDir, "timeline"), Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	var recorder record.EventRecorder = timeline.Events{
		Next: a.events.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: cfg.NodeName}), Rec: a.timeline}

	// The kubelet's pod start-up histograms on /metrics (podstartup).
	startup := podstartup.New(clock.RealClock{})
	var source *podsource.Source
	a.status = status.New(client, func(uid types.UID) (*v1.Pod, bool) {
		if source == nil {
			return nil, false
		}
		return source.Get(uid)
	}, cfg.Log)
	a.status.OnWritten = startup.StatusWritten

	lc := lifecycle.DefaultConfig()
	lc.MaxBackOff = cfg.Kubelet.MaxContainerRestartPeriod
	var workers *podworker.Manager
	a.probes, err = probe.New(probe.Config{
		Exec: a.exec, Recorder: recorder, Timeline: a.timeline, Log: cfg.Log,
		OnUpdate: func(u probe.Update) {
			if workers != nil {
				workers.ProbeUpdate(u.PodUID, u.Container, u.ContainerID, u.State)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	a.workers, err = podworker.New(podworker.Config{
		NodeName: cfg.NodeName, HostIP: hostIP, PodsDir: filepath.Join(agentDir, "pods"),
		MaxPods: cfg.Kubelet.MaxPods, ParallelImagePulls: cfg.Kubelet.ParallelImagePulls(),
		ImagePullRecordsDir: filepath.Join(agentDir, "image_manager"), ImageVerification: cfg.Kubelet.ImageVerification, Allocatable: a.allocatable, Node: a.getNode,
		Runtime: a.runtime, Prober: a.probes, Hooks: hook.New(hook.Config{Exec: a.exec, Log: cfg.Log}),
		Status:    startupStatuses{StatusWriter: &timeline.Statuses{Next: a.status, Rec: a.timeline}, startup: startup},
		PullTimes: startup, Recorder: recorder, Client: client,
		Clock: clock.RealClock{}, Lifecycle: lc, Log: cfg.Log,
		DNS:      podworker.DNSConfig{ClusterDNS: cfg.Kubelet.ClusterDNS, ClusterDomain: cfg.Kubelet.ClusterDomain, ResolvConf: cfg.Kubelet.ResolvConf},
		Security: podsecurity.Node{SeccompDefault: cfg.Kubelet.SeccompDefault, SeccompProfileRoot: filepath.Join(agentDir, "seccomp")},
		Sysctls:  cfg.Kubelet.Sysctls,
		Cgroups:  a.podCgroups(),
		Timeline: a.timeline,
		Unrouter: cfg.Unrouter,
	})
	if err != nil {
		return nil, err
	}
	workers = a.workers
	a.recorder = recorder
	if a.imageGC, err = a.newImageGC(recorder); err != nil {
		return nil, err
	}
	source, err = podsource.New(client, cfg.NodeName, watchedPods{Handler: a.workers, startup: startup})
	if err != nil {
		return nil, err
	}
	a.source = source

	a.metrics = prometheus.NewRegistry()
	a.metrics.MustRegister(startup.Collectors()...)
	a.shutdown, err = shutdown.New(shutdown.Config{
		Bands: shutdown.Bands(cfg.Kubelet), Pods: a.workers, Node: a.node, Recorder: recorder,
		NodeName: cfg.NodeName, StateFile: filepath.Join(agentDir, shutdown.StateFileName),
		Metrics: a.metrics, Log: cfg.Log,
	})
	if err != nil {
		return nil, err
	}
	host := eviction.Host{DataDir: cfg.DataDir, CgroupRoot: "/sys/fs/cgroup"}
	podMeter := eviction.PodMeter{Containers: a.runtime.Containers, Usage: a.runtime.Stats, PodDir: a.workers.PodDir, PodProcesses: a.podProcesses()}
	a.eviction, err = eviction.New(eviction.Config{
		Settings: cfg.Kubelet.Eviction, Period: cfg.Kubelet.EvictionMonitoringPeriod,
		LocalStorage: cfg.Kubelet.LocalStorageCapacityIsolation,
		Observe:      host.Observe,
		Stats:        podMeter.Stats,
		ActivePods:   a.workers.ActivePods,
		Evict: func(uid types.UID, e eviction.Eviction) <-chan struct{} {
			return a.workers.TerminatePod(uid, podworker.Termination{Grace: e.Grace, Reason: eviction.Reason, Message: e.Message, Condition: e.Condition})
		},
		SetPressure: a.node.SetPressure, QOS: lifecycle.QOSClass,
		Recorder: recorder, NodeName: cfg.NodeName, Log: cfg.Log,
	})
	if err != nil {
		return nil, err
	}
	if logs := a.runtime.Logs; logs != nil {
		a.logRotation, err = logrotate.New(logrotate.Config{
			Runtime: struct {
				runtime.Containers
				runtime.LogReopener
			}{a.runtime.Containers, logs},
			Policy:  logrotate.Policy{MaxSize: cfg.Kubelet.ContainerLogMaxSize, MaxFiles: int(cfg.Kubelet.ContainerLogMaxFiles)},
			Workers: int(cfg.Kubelet.ContainerLogMaxWorkers), Interval: cfg.Kubelet.ContainerLogMonitorInterval,
			Log: cfg.Log,
		})
		if err != nil {
			return nil, err
		}
	}
	// Shutdown first: a node going down refuses every pod with its own reason.
	a.workers.SetAdmission(func(pod *v1.Pod) *v1.PodStatus {
		if st := a.shutdown.Admit(pod); st != nil {
			return st
		}
		return a.eviction.Admit(pod)
	})

	// The stats endpoints show the figures the eviction manager acts on.
	stats := &nodestats.Source{NodeName: cfg.NodeName, NodeStart: nodestats.BootTime(), Host: host,
		Pods: a.workers.Pods, Stats: podMeter.Stats}
	resourceMetrics := prometheus.NewRegistry()
	resourceMetrics.MustRegister(nodestats.ResourceCollector{Summary: stats.Summary})
	a.api, err = agentapi.New(agentapi.Config{
		Addr:               net.JoinHostPort("", strconv.Itoa(cfg.AgentPort)),
		CertFile:           filepath.Join(cfg.PKIDir, "agent-serving.crt"),
		KeyFile:            filepath.Join(cfg.PKIDir, "agent-serving.key"),
		ServingCertificate: cfg.ServingCertificate,
		ClientCAFile:       filepath.Join(cfg.PKIDir, "ca.crt"),
		Logs:               a.workers,
		Pods:               a.workers.Pods,
		Streams:            newStreams(a.runtime),
		Metrics:            a.metrics,
		Summary: func(ctx context.Context, onlyCPUAndMemory bool) statsapi.Summary {
			if onlyCPUAndMemory {
				return nodestats.CPUAndMemory(stats.Summary(ctx))
			}
			return stats.Summary(ctx)
		},
		ResourceMetrics: resourceMetrics,
		Shutdown:        a.shutdown.Handler(),
		Timeline:        a.timeline,
		// Other users, as the kubelet's webhook authorization: RBAC on nodes/proxy, nodes/log…
		Authorizer: &agentapi.SubjectAccessReviews{Client: client, NodeName: cfg.NodeName},
		// Bearer tokens (service accounts scraping), as the kubelet's webhook
		// authentication; the Node authorizer lets nodes create TokenReviews.
		TokenReviews: client.AuthenticationV1(),
		Log:          cfg.Log,
	})
	if err != nil {
		return nil, err
	}
	if err := a.api.Listen(); err != nil {
		return nil, err
	}
	ok = true
	return a, nil
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
	go a.runContainerGC(ctx, a.recorder)
	return nil
}

func (a *Agent) cleanupOrphans(ctx context.Context) (pending int) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return a.workers.CleanupOrphans(cctx)
}

// retryCleanupOrphans goes on while the API cannot confirm that a pod is gone.
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
