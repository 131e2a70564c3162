// Package podnet routes pod traffic between nodes: it runs flannel's
// Kubernetes subnet manager (each node's lease is its spec.podCIDR,
// published in flannel.alpha.coreos.com/* annotations on its Node) with the
// host-gw backend, which gives this host a route to every other node's pod
// CIDR via that node's address, as k3s's embedded flannel does. The nodes
// must share one layer-2 network (host-gw routes through no tunnel).
package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/flannel-io/flannel/pkg/backend"
	"github.com/flannel-io/flannel/pkg/backend/hostgw"
	"github.com/flannel-io/flannel/pkg/subnet"
	"github.com/flannel-io/flannel/pkg/subnet/kube"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// annotationPrefix is flannel's (and k3s's): nodes of a cluster that also
// runs flannel see each other.
const annotationPrefix = "flannel.alpha.coreos.com"

// Config says which node this is and where its pod network lies.
type Config struct {
	// Kubeconfig holds the node's own credentials (system:node:NodeName).
	// The Node authorizer lets a node patch its own Node's status, through
	// which flannel writes its annotations; reading the other Nodes takes
	// RBAC (podvisor's control plane binds podvisor:node-network to
	// system:nodes).
	Kubeconfig string
	NodeName   string
	// NodeIP is the node's InternalIP: the address other nodes route this
	// node's pods through. It must be on an interface of this host.
	NodeIP net.IP
	// ClusterCIDR is the pod network every node's pod CIDR lies in.
	ClusterCIDR netip.Prefix
	// Dir holds flannel's net-conf.json.
	Dir string
	Log *slog.Logger
}

// nodeNameEnv serialises flannel's constructor, which takes the node name
// from the environment (NODE_NAME), so that two agents of one process never
// see each other's.
var nodeNameEnv sync.Mutex

// Run publishes this node's lease (its pod CIDR and NodeIP on its Node) and
// returns once that is done; routes to other nodes' pod CIDRs then follow
// their Nodes in the background until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if !cfg.ClusterCIDR.Addr().Is4() {
		return fmt.Errorf("pod network %s: only IPv4 cluster CIDRs are routed across nodes", cfg.ClusterCIDR)
	}
	ext, err := externalInterface(cfg.NodeIP)
	if err != nil {
		return err
	}
	if err := enableForwarding(); err != nil {
		return err
	}
	netConf, err := writeNetConf(cfg.Dir, cfg.ClusterCIDR)
	if err != nil {
		return err
	}
	if err := ensureAnnotations(ctx, cfg); err != nil {
		return err
	}
	// flannel's goroutines live until ctx ends: on an error, end them now.
	ctx, cancel := context.WithCancel(ctx)
	started := false
	defer func() {
		if !started {
			cancel()
		}
	}()
	sm, err := subnetManager(ctx, cfg, netConf)
	if err != nil {
		return err
	}
	be, err := hostgw.New(remoteLeases{Manager: sm, log: cfg.Log, localAddrs: net.InterfaceAddrs}, ext)
	if err != nil {
		return fmt.Errorf("flannel host-gw: %w", err)
	}
	sc, err := sm.GetNetworkConfig(ctx)
	if err != nil {
		return fmt.Errorf("flannel: %w", err)
	}
	var wg sync.WaitGroup
	network, err := be.RegisterNetwork(ctx, &wg, sc)
	if err != nil {
		return fmt.Errorf("flannel host-gw: %w", err)
	}
	markRoutes(network)
	if err := sm.CompleteLease(ctx, network.Lease(), &wg); err != nil {
		return fmt.Errorf("flannel: %w", err)
	}
	cfg.Log.Info("pod network routes across nodes", "backend", "host-gw", "podCIDR", network.Lease().Subnet.String(), "nodeIP", cfg.NodeIP.String(), "interface", ext.IfaceName)
	started = true
	go func() {
		defer cancel()
		network.Run(ctx)
	}()
	return nil
}

// subnetManager starts flannel's Kubernetes subnet manager with the node's
// credentials and waits for its informer on Nodes to sync.
func subnetManager(ctx context.Context, cfg Config, netConf string) (subnet.Manager, error) {
	nodeNameEnv.Lock()
	defer nodeNameEnv.Unlock()
	old, had := os.LookupEnv("NODE_NAME")
	os.Setenv("NODE_NAME", cfg.NodeName)
	defer func() {
		if had {
			os.Setenv("NODE_NAME", old)
		} else {
			os.Unsetenv("NODE_NAME")
		}
	}()
	// setNodeNetworkUnavailable false: no cloud route controller sets the
	// NetworkUnavailable condition here, so there is none to clear.
	sm, err := kube.NewSubnetManager(ctx, "", cfg.Kubeconfig, annotationPrefix, netConf, false)
	if err != nil {
		return nil, fmt.Errorf("flannel subnet manager: %w", err)
	}
	return sm, nil
}

// ensureAnnotations gives the node an annotation map before flannel reads
// it: flannel's AcquireLease writes into the map of the Node it has cached,
// and panics on a Node without annotations (a fresh podvisor node has
// none). The annotation is flannel's own, overwritten by AcquireLease; other
// nodes ignore it until flannel marks the node kube-subnet-manager=true.
func ensureAnnotations(ctx context.Context, cfg Config) error {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("pod network: %w", err)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("pod network: node %s: %w", cfg.NodeName, err)
	}
	if len(n.Annotations) > 0 {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"host-gw"}}}`, annotationPrefix+"/backend-type")
	// Through the status subresource, as flannel patches: a node may write
	// its own Node's status.
	if _, err := c.CoreV1().Nodes().PatchStatus(ctx, cfg.NodeName, []byte(patch)); err != nil {
		return fmt.Errorf("pod network: annotating node %s: %w", cfg.NodeName, err)
	}
	return nil
}

// writeNetConf writes flannel's net-conf.json for the cluster CIDR.
func writeNetConf(dir string, clusterCIDR netip.Prefix) (string, error) {
	conf := map[string]any{
		"Network":    clusterCIDR.Masked().String(),
		"EnableIPv4": true,
		"Backend":    map[string]string{"Type": "host-gw"},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("pod network: %w", err)
	}
	path := filepath.Join(dir, "net-conf.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("pod network: %w", err)
	}
	return path, nil
}

// externalInterface is the interface holding the node IP: host-gw routes
// leave through it, to next hops on its network.
func externalInterface(nodeIP net.IP) (*backend.ExternalInterface, error) {
	if nodeIP == nil {
		return nil, errors.New("pod network: the node has no IP to route its pods through")
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("pod network: %w", err)
	}
	for i := range ifaces {
		addrs, err := ifaces[i].Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(nodeIP) {
				ip := nodeIP.To4()
				return &backend.ExternalInterface{Iface: &ifaces[i], IfaceName: ifaces[i].Name, IfaceAddr: ip, ExtAddr: ip}, nil
			}
		}
	}
	return nil, fmt.Errorf("pod network: node IP %s is on no interface of this host", nodeIP)
}

// enableForwarding turns IPv4 forwarding on: pods of other nodes reach this
// node's pods through it. (The bridge plugin turns it on too, but only when
// it sets up the first pod.)
func enableForwarding() error {
	const path = "/proc/sys/net/ipv4/ip_forward"
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("pod network: enabling IP forwarding: %w", err)
	}
	return nil
}
