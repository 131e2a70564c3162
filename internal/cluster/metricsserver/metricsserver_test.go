package metricsserver

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/spf13/pflag"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	aggfake "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"
	"sigs.k8s.io/metrics-server/cmd/metrics-server/app/options"
)

// Args are flags metrics-server's own options take, and they say what
// podvisor means: the nodes' status port, the CA, k3s's resolution.
func TestArgsParseAsMetricsServerFlags(t *testing.T) {
	cfg := Config{Kubeconfig: "/d/ms.kubeconfig", CAFile: "/d/ca.crt", CertFile: "/d/s.crt", KeyFile: "/d/s.key",
		Addr: net.ParseIP("192.0.2.2"), Port: 10260}
	o := options.NewOptions()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	for _, s := range o.Flags().FlagSets {
		fs.AddFlagSet(s)
	}
	if err := fs.Parse(Args(cfg)); err != nil {
		t.Fatal(err)
	}
	if !o.KubeletClient.KubeletUseNodeStatusPort || o.KubeletClient.KubeletCAFile != cfg.CAFile || o.KubeletClient.InsecureKubeletTLS {
		t.Errorf("kubelet client options %+v", o.KubeletClient)
	}
	if o.MetricResolution != DefaultResolution {
		t.Errorf("resolution %v, want %v", o.MetricResolution, DefaultResolution)
	}
	if o.SecureServing.BindPort != 10260 || !o.SecureServing.BindAddress.Equal(cfg.Addr) {
		t.Errorf("serving at %v:%d", o.SecureServing.BindAddress, o.SecureServing.BindPort)
	}
	if o.Kubeconfig != cfg.Kubeconfig || o.Authentication.RemoteKubeConfigFile != cfg.Kubeconfig {
		t.Errorf("kubeconfigs %q, %q", o.Kubeconfig, o.Authentication.RemoteKubeConfigFile)
	}
	if errs := o.KubeletClient.Validate(); len(errs) > 0 {
		t.Errorf("kubelet client options refused: %v", errs)
	}
}

func TestArgsResolution(t *testing.T) {
	o := options.NewOptions()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	for _, s := range o.Flags().FlagSets {
		fs.AddFlagSet(s)
	}
	if err := fs.Parse(Args(Config{Addr: net.ParseIP("192.0.2.2"), Port: 1, Resolution: 30 * time.Second})); err != nil {
		t.Fatal(err)
	}
	if o.MetricResolution != 30*time.Second {
		t.Errorf("resolution %v", o.MetricResolution)
	}
}

// The aggregator reaches metrics-server through the Service's port 443 at
// the endpoint the slice names.
func TestServiceAndSlice(t *testing.T) {
	svc := Service(10260)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.IntValue() != 10260 || svc.Spec.Selector != nil {
		t.Errorf("service %+v", svc.Spec)
	}
	for _, tc := range []struct {
		addr   string
		family discoveryv1.AddressType
	}{{"192.0.2.2", discoveryv1.AddressTypeIPv4}, {"2001:db8::2", discoveryv1.AddressTypeIPv6}} {
		s := Slice(net.ParseIP(tc.addr), 10260)
		if s.AddressType != tc.family || s.Endpoints[0].Addresses[0] != tc.addr || *s.Ports[0].Port != 10260 ||
			*s.Ports[0].Name != svc.Spec.Ports[0].Name || s.Labels[discoveryv1.LabelServiceName] != ServiceName {
			t.Errorf("%s: slice %+v", tc.addr, s)
		}
	}
}

// EnsureClusterObjects makes everything once and follows a moved address;
// an APIService of the user's own is left alone, and RemoveAPIService
// removes only podvisor's.
func TestEnsureClusterObjects(t *testing.T) {
	ctx := context.Background()
	c, agg := fake.NewClientset(), aggfake.NewClientset()
	for _, addr := range []string{"192.0.2.2", "192.0.2.2", "192.0.2.7"} {
		if err := EnsureClusterObjects(ctx, c, agg, net.ParseIP(addr), 10260, []byte("CA")); err != nil {
			t.Fatal(err)
		}
		s, err := c.DiscoveryV1().EndpointSlices(Namespace).Get(ctx, ServiceName, metav1.GetOptions{})
		if err != nil || s.Endpoints[0].Addresses[0] != addr {
			t.Fatalf("slice %v, %v; want %s", s, err, addr)
		}
	}
	a, err := agg.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
	if err != nil || string(a.Spec.CABundle) != "CA" || a.Spec.Service.Name != ServiceName {
		t.Fatalf("APIService %v, %v", a, err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Get(ctx, "system:metrics-server", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if err := RemoveAPIService(ctx, agg); err != nil {
		t.Fatal(err)
	}
	if _, err := agg.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{}); err == nil {
		t.Error("podvisor's APIService not removed")
	}

	theirs := APIService([]byte("THEIRS"))
	theirs.Labels = nil
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, theirs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureClusterObjects(ctx, c, agg, net.ParseIP("192.0.2.2"), 10260, []byte("CA")); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAPIService(ctx, agg); err != nil {
		t.Fatal(err)
	}
	a, err = agg.ApiregistrationV1().APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
	if err != nil || string(a.Spec.CABundle) != "THEIRS" {
		t.Errorf("the user's APIService was changed or removed: %v, %v", a, err)
	}
}
