package clusterdns

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Config is the node's DNS.
type Config struct {
	Client        kubernetes.Interface
	Kubeconfig    string // for the kubernetes plugin
	NodeName      string
	Addr          netip.Addr
	Port          int
	ClusterDomain string
	ServiceCIDR   string
	ResolvConf    string // the node's resolv.conf
	FragmentDir   string // the data dir's Corefile fragments
	// ManageService creates the kube-dns Service when it is missing (the
	// server does; agents only publish their endpoint).
	ManageService bool
	Log           *slog.Logger
}

// recheck is how often the data dir's fragments are reread and the node's
// endpoint re-published (a deleted EndpointSlice comes back).
const recheck = 10 * time.Second

// Run serves DNS until ctx ends. It never stops the node: failures are log
// lines and Events, and a bad user fragment leaves the last good
// configuration serving.
func Run(ctx context.Context, cfg Config) {
	log := cfg.Log.With("component", "cluster-dns")
	if !cfg.Addr.IsValid() {
		log.Error("cluster DNS not started: the node has no address pods can reach")
		return
	}
	upstream := UpstreamResolvConf(cfg.ResolvConf, fileExists)
	SetDefaultPort(cfg.Port)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "podvisor-cluster-dns", Host: cfg.NodeName})

	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace("kube-system"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", CustomConfigMap).String()
		}))
	cms := factory.Core().V1().ConfigMaps()
	_, _ = cms.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() },
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	factory.WaitForCacheSync(ctx.Done())

	srv := &Server{}
	defer srv.Stop()
	lastErr := ""
	apply := func() {
		var cmData map[string]string
		var cm *v1.ConfigMap
		if got, err := cms.Lister().ConfigMaps("kube-system").Get(CustomConfigMap); err == nil {
			cm, cmData = got, got.Data
		}
		files, err := ReadFragments(cfg.FragmentDir)
		if err != nil {
			log.Error("reading DNS fragments", "dir", cfg.FragmentDir, "err", err)
		}
		custom, ignored := Merge(cmData, files)
		for _, name := range ignored {
			log.Warn("DNS customization ignored: the name ends neither in .server nor in .override", "source", name)
		}
		p := Params{Addr: cfg.Addr, Port: cfg.Port, ClusterDomain: cfg.ClusterDomain, Kubeconfig: cfg.Kubeconfig,
			Upstream: upstream, Custom: custom}
		base := p
		base.Custom = Custom{}
		did, fellBack, err := srv.ApplyOr(Corefile(p), Corefile(base))
		if fellBack {
			log.Info("cluster DNS serving, without the customizations", "addr", netip.AddrPortFrom(cfg.Addr, uint16(cfg.Port)).String(),
				"upstream", upstream)
		}
		if err != nil {
			if err.Error() != lastErr {
				log.Error("DNS configuration rejected", "err", err)
				recorder.Eventf(eventTarget(cm, cfg.NodeName), v1.EventTypeWarning, "InvalidDNSConfiguration",
					"cluster DNS on node %s: %v", cfg.NodeName, err)
			}
			lastErr = err.Error()
			return
		}
		lastErr = ""
		if did {
			log.Info("cluster DNS serving", "addr", netip.AddrPortFrom(cfg.Addr, uint16(cfg.Port)).String(),
				"upstream", upstream, "overrides", len(custom.Overrides), "servers", len(custom.Servers))
		}
	}
	apply()
	publish := func() {
		if err := ensureEndpoints(ctx, cfg); err != nil && ctx.Err() == nil {
			log.Error("publishing the node's DNS endpoint", "err", err)
		}
	}
	publish()
	defer unpublish(cfg, log)
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			apply()
		case <-tick.C:
			apply()
			publish()
		}
	}
}

// eventTarget: the ConfigMap when there is one (users look there), else the
// Node (a data-dir fragment is the node's).
func eventTarget(cm *v1.ConfigMap, node string) *v1.ObjectReference {
	if cm != nil {
		return &v1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID}
	}
	return &v1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// unpublish withdraws the node's endpoint when the DNS stops, so that pods
// are not sent to a node that no longer answers.
func unpublish(cfg Config, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := cfg.Client.DiscoveryV1().EndpointSlices("kube-system").Delete(ctx, SliceName(cfg.NodeName), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		log.Warn("withdrawing the node's DNS endpoint", "err", err)
	}
}
