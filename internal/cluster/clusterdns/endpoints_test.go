package clusterdns

import (
	"context"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestEnsureEndpoints(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	cfg := Config{Client: c, NodeName: "n1", Addr: netip.MustParseAddr("192.0.2.7"), Port: 10053,
		ServiceCIDR: "10.43.0.0/16", ManageService: true}
	for range 2 { // the second round finds everything in place
		if err := ensureEndpoints(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := c.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.43.0.10" || len(svc.Spec.Selector) != 0 || svc.Spec.Ports[0].TargetPort.IntValue() != 10053 {
		t.Errorf("kube-dns: %+v", svc.Spec)
	}
	slice, err := c.DiscoveryV1().EndpointSlices("kube-system").Get(ctx, "kube-dns-n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if slice.Labels["kubernetes.io/service-name"] != "kube-dns" || slice.Endpoints[0].Addresses[0] != "192.0.2.7" ||
		*slice.Endpoints[0].NodeName != "n1" || *slice.Ports[0].Port != 10053 || *slice.Ports[1].Port != 10053 {
		t.Errorf("slice: %+v", slice)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Get(ctx, nodeRole, metav1.GetOptions{}); err != nil {
		t.Errorf("nodes' RBAC: %v", err)
	}

	// The node's DNS moved to another port: its slice follows.
	cfg.Port = 10054
	if err := ensureEndpoints(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	slice, _ = c.DiscoveryV1().EndpointSlices("kube-system").Get(ctx, "kube-dns-n1", metav1.GetOptions{})
	if *slice.Ports[0].Port != 10054 {
		t.Errorf("slice port after the move = %d, want 10054", *slice.Ports[0].Port)
	}
}
