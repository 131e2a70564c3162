package clusterdns

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// ServiceName is the cluster DNS Service in kube-system, named as k3s and
// kubeadm name it (clients and charts look for it).
const ServiceName = "kube-dns"

// managedBy marks the EndpointSlices podvisor writes, so that the
// EndpointSlice controller (which owns slices of Services with a selector)
// leaves them alone.
const managedBy = "cluster-dns.podvisor.io"

// ServicePort is the port pods query; each node's DNS listens on its own
// port, which its EndpointSlice names.
const ServicePort = 53

// SliceName is the node's EndpointSlice of kube-dns.
func SliceName(node string) string { return ServiceName + "-" + node }

// Service is kube-dns: no selector, because the endpoints are the nodes'
// own DNS servers, which each node's podvisor publishes; traffic policy
// Local so that a pod asks its own node's DNS (no cross-node hop, and a
// node's DNS failing affects that node's pods only).
func Service(ip string, targetPort int) *v1.Service {
	local := v1.ServiceInternalTrafficPolicyLocal
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: "kube-system", Labels: map[string]string{
			"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", "kubernetes.io/cluster-service": "true"}},
		Spec: v1.ServiceSpec{
			ClusterIP: ip, ClusterIPs: []string{ip}, InternalTrafficPolicy: &local,
			Ports: []v1.ServicePort{
				{Name: "dns", Protocol: v1.ProtocolUDP, Port: ServicePort, TargetPort: intstr.FromInt(targetPort)},
				{Name: "dns-tcp", Protocol: v1.ProtocolTCP, Port: ServicePort, TargetPort: intstr.FromInt(targetPort)},
			},
		},
	}
}

// Slice is the node's endpoint of kube-dns: its address and DNS port, owned
// by the Node so that it goes when the node is deleted.
func Slice(node string, nodeUID string, addr string, port int) *discoveryv1.EndpointSlice {
	udp, tcp := v1.ProtocolUDP, v1.ProtocolTCP
	p := int32(port)
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: SliceName(node), Namespace: "kube-system",
			Labels:          map[string]string{discoveryv1.LabelServiceName: ServiceName, discoveryv1.LabelManagedBy: managedBy},
			OwnerReferences: ownerNode(node, nodeUID)},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Protocol: &udp, Port: &p},
			{Name: ptr.To("dns-tcp"), Protocol: &tcp, Port: &p},
		},
	}
}

func ownerNode(node, uid string) []metav1.OwnerReference {
	if uid == "" {
		return nil
	}
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID(uid)}}
}

// EnsureClusterObjects makes what the cluster's DNS needs once, with
// admin credentials: the kube-dns Service (left alone when it exists, so a
// cluster's own DNS keeps its Service) and the RBAC with which every node
// serves and publishes its DNS.
func EnsureClusterObjects(ctx context.Context, c kubernetes.Interface, serviceCIDR string, port int) error {
	if err := ensureNodeAccess(ctx, c); err != nil {
		return err
	}
	ip, err := ServiceIP(serviceCIDR)
	if err != nil {
		return err
	}
	// Get before Create: creating it again fails on its taken ClusterIP
	// before the API server sees that the name exists.
	_, err = c.CoreV1().Services("kube-system").Get(ctx, ServiceName, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	_, err = c.CoreV1().Services("kube-system").Create(ctx, Service(ip.String(), port), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Service kube-system/%s at %s: %w", ServiceName, ip, err)
	}
	return nil
}

// ensureEndpoints creates the Service (when this node manages it) and
// writes the node's EndpointSlice as it should be.
func ensureEndpoints(ctx context.Context, cfg Config) error {
	c := cfg.Client
	if cfg.ManageService {
		if err := EnsureClusterObjects(ctx, c, cfg.ServiceCIDR, cfg.Port); err != nil {
			return err
		}
	}
	var uid string
	if n, err := c.CoreV1().Nodes().Get(ctx, cfg.NodeName, metav1.GetOptions{}); err == nil {
		uid = string(n.UID)
	}
	want := Slice(cfg.NodeName, uid, cfg.Addr.String(), cfg.Port)
	slices := c.DiscoveryV1().EndpointSlices("kube-system")
	got, err := slices.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = slices.Create(ctx, want, metav1.CreateOptions{})
		return wrapSlice(err)
	}
	if err != nil {
		return wrapSlice(err)
	}
	if sameSlice(got, want) {
		return nil
	}
	want.ResourceVersion = got.ResourceVersion
	_, err = slices.Update(ctx, want, metav1.UpdateOptions{})
	return wrapSlice(err)
}

func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	if len(a.Endpoints) != 1 || len(a.Ports) != 2 || len(a.Endpoints[0].Addresses) != 1 {
		return false
	}
	return a.Endpoints[0].Addresses[0] == b.Endpoints[0].Addresses[0] && *a.Ports[0].Port == *b.Ports[0].Port &&
		len(a.OwnerReferences) == len(b.OwnerReferences)
}

func wrapSlice(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("EndpointSlice kube-system of %s: %w", ServiceName, err)
}
