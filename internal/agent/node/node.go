// Package node keeps this machine's Node object true: registration, the Lease
// heartbeat in kube-node-lease, capacity, addresses and conditions.
package node

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/eviction"
)

// LeaseNamespace holds the node heartbeats.
const LeaseNamespace = "kube-node-lease"

// Config is what the node manager needs.
type Config struct {
	Name string
	// RuntimeVersion is the node's containerRuntimeVersion
	// ("containerd://2.3.6"); empty: the process runtime's.
	RuntimeVersion        string
	HostIP                net.IP
	AgentPort             int32
	DataDir               string
	MaxPods               int32
	StatusUpdateFrequency time.Duration // how often the status is computed
	StatusReportFrequency time.Duration // how often it is written when nothing changed
	LeaseDurationSeconds  int32
	HardEviction          []eviction.Threshold // for allocatable
	Client                kubernetes.Interface
	Clock                 clock.WithTicker
	Log                   *slog.Logger
}

// Manager registers the node and keeps its status and lease fresh.
type Manager struct {
	cfg Config

	mu         sync.Mutex
	readiness  Readiness
	network    Readiness // the runtime's pod network (CRI NetworkReady)
	pressure   []v1.NodeConditionType
	lastReport time.Time
	poke       chan struct{}
}

// New validates cfg and fills defaults.
func New(cfg Config) (*Manager, error) {
	if cfg.Name == "" || cfg.Client == nil {
		return nil, fmt.Errorf("node: name and client are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.StatusUpdateFrequency <= 0 {
		cfg.StatusUpdateFrequency = 10 * time.Second
	}
	if cfg.StatusReportFrequency <= 0 {
		cfg.StatusReportFrequency = 5 * time.Minute
	}
	if cfg.LeaseDurationSeconds <= 0 {
		cfg.LeaseDurationSeconds = 40
	}
	return &Manager{cfg: cfg, readiness: Readiness{Ready: true}, network: Readiness{Ready: true}, poke: make(chan struct{}, 1)}, nil
}

// SetReadiness changes the Ready condition and writes it at once.
func (m *Manager) SetReadiness(r Readiness) {
	m.mu.Lock()
	m.readiness = r
	m.mu.Unlock()
	m.wake()
}

// wake has the status written at once.
func (m *Manager) wake() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// SetNetworkReadiness says whether the runtime's pod network is ready; the
// node is Ready only while it is (and SetReadiness allows it), as a kubelet
// whose runtime reports NetworkReady false.
func (m *Manager) SetNetworkReadiness(r Readiness) {
	m.mu.Lock()
	m.network = r
	m.mu.Unlock()
	m.wake()
}

// SetPressure publishes the eviction manager's pressure conditions at once.
func (m *Manager) SetPressure(conds []v1.NodeConditionType) {
	m.mu.Lock()
	m.pressure = append([]v1.NodeConditionType(nil), conds...)
	m.mu.Unlock()
	m.wake()
}

// Register creates the Node, or brings an existing one (an earlier run) up to date.
func (m *Manager) Register(ctx context.Context) error {
	nodes := m.cfg.Client.CoreV1().Nodes()
	want := m.desiredNode()
	_, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	switch {
	case err == nil:
	case apierrors.IsAlreadyExists(err):
		// Only the labels: a full update would carry taints, which
		// NodeRestriction forbids a node to change.
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": want.Labels}})
		if err != nil {
			return err
		}
		if _, err := nodes.Patch(ctx, m.cfg.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("update node %s: %w", m.cfg.Name, err)
		}
	default:
		return fmt.Errorf("register node %s: %w", m.cfg.Name, err)
	}
	if err := m.syncStatus(ctx, true); err != nil {
		return err
	}
	return m.renewLease(ctx)
}

// Run keeps the lease and status fresh until ctx ends. Call Register first.
func (m *Manager) Run(ctx context.Context) {
	leaseEvery := time.Duration(m.cfg.LeaseDurationSeconds) * time.Second / 4
	lease := m.cfg.Clock.NewTicker(leaseEvery)
	defer lease.Stop()
	status := m.cfg.Clock.NewTicker(m.cfg.StatusUpdateFrequency)
	defer status.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C():
			if err := m.renewLease(ctx); err != nil && ctx.Err() == nil {
				m.cfg.Log.Warn("renewing node lease", "node", m.cfg.Name, "err", err)
			}
		case <-status.C():
			m.syncAndLog(ctx, false)
		case <-m.poke:
			m.syncAndLog(ctx, true)
		}
	}
}

func (m *Manager) syncAndLog(ctx context.Context, force bool) {
	if err := m.syncStatus(ctx, force); err != nil && ctx.Err() == nil {
		m.cfg.Log.Warn("updating node status", "node", m.cfg.Name, "err", err)
	}
}

func (m *Manager) desiredNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: m.cfg.Name,
			Labels: map[string]string{
				"kubernetes.io/hostname":  m.cfg.Name,
				"kubernetes.io/os":        runtime.GOOS,
				"kubernetes.io/arch":      runtime.GOARCH,
				"beta.kubernetes.io/os":   runtime.GOOS,
				"beta.kubernetes.io/arch": runtime.GOARCH,
			},
		},
	}
}

// syncStatus computes the status and writes it when something changed, when the
// report period has passed, or when force is set.
func (m *Manager) syncStatus(ctx context.Context, force bool) error {
	m.mu.Lock()
	readiness, pressure := m.readiness, m.pressure
	if readiness.Ready && !m.network.Ready {
		readiness = m.network
	}
	due := force || m.cfg.Clock.Since(m.lastReport) >= m.cfg.StatusReportFrequency
	m.mu.Unlock()
	now := metav1.NewTime(m.cfg.Clock.Now())
	in := StatusInput{Machine: ReadMachine(m.cfg.DataDir), MaxPods: m.cfg.MaxPods, Readiness: readiness, Now: now,
		Pressure: pressure, HardEviction: m.cfg.HardEviction}
	nodes := m.cfg.Client.CoreV1().Nodes()
	cur, err := nodes.Get(ctx, m.cfg.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	conds, changed := mergeConditions(cur.Status.Conditions, conditions(in), now, due)
	capacity, allocatable := resources(in)
	features := declaredFeatures()
	if !changed && !due && quantitiesEqual(cur.Status.Capacity, capacity) && slices.Equal(cur.Status.DeclaredFeatures, features) {
		return nil
	}
	// A strategic merge patch of the status only, as the kubelet sends: an
	// update would carry the node's spec too, and NodeRestriction refuses any
	// update whose taints differ from the stored ones (the node lifecycle
	// controller adds and removes taints at any time).
	st := v1.NodeStatus{
		Conditions: conds, Capacity: capacity, Allocatable: allocatable,
		Addresses: m.addresses(), NodeInfo: nodeInfo(m.cfg.RuntimeVersion), DeclaredFeatures: features,
	}
	st.DaemonEndpoints.KubeletEndpoint.Port = m.cfg.AgentPort
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	_, err = nodes.Patch(ctx, m.cfg.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	wrote := err == nil
	if wrote {
		m.mu.Lock()
		m.lastReport = m.cfg.Clock.Now()
		m.mu.Unlock()
	}
	return err
}

func quantitiesEqual(a, b v1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		// Free memory and disk move all the time; capacity is what must match.
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

func (m *Manager) addresses() []v1.NodeAddress {
	var out []v1.NodeAddress
	if m.cfg.HostIP != nil {
		out = append(out, v1.NodeAddress{Type: v1.NodeInternalIP, Address: m.cfg.HostIP.String()})
	}
	host, _ := os.Hostname()
	if host == "" {
		host = m.cfg.Name
	}
	return append(out, v1.NodeAddress{Type: v1.NodeHostName, Address: host})
}

func (m *Manager) renewLease(ctx context.Context) error {
	leases := m.cfg.Client.CoordinationV1().Leases(LeaseNamespace)
	now := metav1.NewMicroTime(m.cfg.Clock.Now())
	lease, err := leases.Get(ctx, m.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := m.cfg.Client.CoreV1().Nodes().Get(ctx, m.cfg.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: m.cfg.Name, Namespace: LeaseNamespace,
				// Owned by the node so the lease goes when the node is deleted, as upstream.
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(m.cfg.Name),
				LeaseDurationSeconds: ptr.To(m.cfg.LeaseDurationSeconds),
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.HolderIdentity = ptr.To(m.cfg.Name)
	lease.Spec.LeaseDurationSeconds = ptr.To(m.cfg.LeaseDurationSeconds)
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}
