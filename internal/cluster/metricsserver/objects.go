package metricsserver

import (
	"context"
	"fmt"
	"net"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/cluster/ensure"
)

// Names as upstream's and k3s's manifests name them: charts, dashboards
// and `kubectl get apiservice` users look for these.
const (
	Namespace      = "kube-system"
	ServiceName    = "metrics-server"
	APIServiceName = "v1beta1.metrics.k8s.io"
	// User is the embedded metrics-server's identity (its client
	// certificate's CN): upstream binds the same roles to a service account.
	User = "system:metrics-server"
	// servicePort is the Service's port, as upstream's (the aggregator
	// dials the endpoint's own port).
	servicePort = 443
	portName    = "https"
)

// managedBy marks what podvisor writes: the EndpointSlice (so that the
// EndpointSlice controller leaves it alone) and the APIService (so that
// turning metrics-server off removes only podvisor's own).
const managedBy = "podvisor"

var labels = map[string]string{"k8s-app": "metrics-server", "app.kubernetes.io/managed-by": managedBy}

// Service is the metrics-server Service: no selector, its one endpoint is
// the control plane's machine, where metrics-server runs in-process.
func Service(port int) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: labels},
		Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{
			Name: portName, Protocol: v1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt(port),
		}}},
	}
}

// Slice is the Service's endpoint: addr:port, where metrics-server listens.
func Slice(addr net.IP, port int) *discoveryv1.EndpointSlice {
	family := discoveryv1.AddressTypeIPv4
	if addr.To4() == nil {
		family = discoveryv1.AddressTypeIPv6
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName, Namespace: Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: ServiceName, discoveryv1.LabelManagedBy: "metrics-server." + managedBy + ".io"}},
		AddressType: family,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(portName), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To(int32(port))}},
	}
}

// APIService registers metrics.k8s.io/v1beta1 with the aggregator, served
// by the Service; caBundle verifies metrics-server's serving certificate.
func APIService(caBundle []byte) *apiregv1.APIService {
	return &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: APIServiceName, Labels: labels},
		Spec: apiregv1.APIServiceSpec{
			Service:              &apiregv1.ServiceReference{Namespace: Namespace, Name: ServiceName, Port: ptr.To[int32](servicePort)},
			Group:                "metrics.k8s.io",
			Version:              "v1beta1",
			CABundle:             caBundle,
			GroupPriorityMinimum: 100,
			VersionPriority:      100,
		},
	}
}

// rbac are upstream metrics-server's roles and bindings, bound to User.
func rbac() ([]*rbacv1.ClusterRole, []*rbacv1.ClusterRoleBinding, *rbacv1.RoleBinding) {
	read := []string{"get", "list", "watch"}
	user := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: User}}
	roles := []*rbacv1.ClusterRole{
		// Users who may view pods may read their metrics (kubectl top).
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregated-metrics-reader", Labels: map[string]string{
			"rbac.authorization.k8s.io/aggregate-to-admin": "true",
			"rbac.authorization.k8s.io/aggregate-to-edit":  "true",
			"rbac.authorization.k8s.io/aggregate-to-view":  "true",
		}}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods", "nodes"}, Verbs: read}}},
		// What metrics-server itself reads: the nodes' resource metrics.
		{ObjectMeta: metav1.ObjectMeta{Name: "system:metrics-server"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: read},
		}},
	}
	bind := func(name, role string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: user}
	}
	bindings := []*rbacv1.ClusterRoleBinding{
		bind("system:metrics-server", "system:metrics-server"),
		// Delegated authentication and authorization of the requests the
		// aggregator forwards (TokenReview, SubjectAccessReview).
		bind("metrics-server:system:auth-delegator", "system:auth-delegator"),
	}
	// The requestheader CA the API server publishes in kube-system.
	reader := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server-auth-reader", Namespace: Namespace},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"}, Subjects: user}
	return roles, bindings, reader
}

// EnsureClusterObjects makes or updates what the aggregator needs to reach
// metrics-server at addr:port, with admin credentials. An APIService of
// the same name that podvisor did not make (a metrics-server of the
// user's own) is left alone.
func EnsureClusterObjects(ctx context.Context, c kubernetes.Interface, agg aggregator.Interface, addr net.IP, port int, caBundle []byte) error {
	roles, bindings, reader := rbac()
	for _, r := range roles {
		if err := ensure.Object(ctx, c.RbacV1().ClusterRoles(), r, "metrics-server object "+r.Name); err != nil {
			return err
		}
	}
	for _, b := range bindings {
		if err := ensure.Object(ctx, c.RbacV1().ClusterRoleBindings(), b, "metrics-server object "+b.Name); err != nil {
			return err
		}
	}
	if err := ensure.Object(ctx, c.RbacV1().RoleBindings(Namespace), reader, "metrics-server object "+reader.Name); err != nil {
		return err
	}
	if err := ensureService(ctx, c, port); err != nil {
		return err
	}
	if err := ensureSlice(ctx, c, Slice(addr, port)); err != nil {
		return err
	}
	return ensureAPIService(ctx, agg, APIService(caBundle))
}

// ensureService keeps the Service's ClusterIP: only its port is ours to set.
func ensureService(ctx context.Context, c kubernetes.Interface, port int) error {
	want := Service(port)
	svcs := c.CoreV1().Services(Namespace)
	got, err := svcs.Get(ctx, ServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = svcs.Create(ctx, want, metav1.CreateOptions{})
	} else if err == nil && (len(got.Spec.Ports) != 1 || got.Spec.Ports[0].TargetPort != want.Spec.Ports[0].TargetPort || len(got.Spec.Selector) > 0) {
		got.Spec.Ports, got.Spec.Selector = want.Spec.Ports, nil
		_, err = svcs.Update(ctx, got, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("Service %s/%s: %w", Namespace, ServiceName, err)
	}
	return nil
}

func ensureSlice(ctx context.Context, c kubernetes.Interface, want *discoveryv1.EndpointSlice) error {
	slices := c.DiscoveryV1().EndpointSlices(Namespace)
	got, err := slices.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = slices.Create(ctx, want, metav1.CreateOptions{})
	} else if err == nil && !sameSlice(got, want) {
		want.ResourceVersion = got.ResourceVersion
		_, err = slices.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("EndpointSlice %s/%s: %w", Namespace, want.Name, err)
	}
	return nil
}

// sameSlice: one endpoint at the same address and port.
func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	return a.AddressType == b.AddressType && len(a.Endpoints) == 1 && len(a.Endpoints[0].Addresses) == 1 &&
		a.Endpoints[0].Addresses[0] == b.Endpoints[0].Addresses[0] &&
		len(a.Ports) == 1 && a.Ports[0].Port != nil && *a.Ports[0].Port == *b.Ports[0].Port &&
		a.Ports[0].Name != nil && *a.Ports[0].Name == portName
}

func ensureAPIService(ctx context.Context, agg aggregator.Interface, want *apiregv1.APIService) error {
	svcs := agg.ApiregistrationV1().APIServices()
	got, err := svcs.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = svcs.Create(ctx, want, metav1.CreateOptions{})
	case err != nil:
	case !ours(got):
		return nil
	default:
		got.Spec = want.Spec
		_, err = svcs.Update(ctx, got, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("APIService %s: %w", want.Name, err)
	}
	return nil
}

func ours(a *apiregv1.APIService) bool { return a.Labels["app.kubernetes.io/managed-by"] == managedBy }

// RemoveAPIService deletes podvisor's APIService (metrics-server turned
// off), so that discovery does not report metrics.k8s.io as unavailable;
// one of the user's own stays.
func RemoveAPIService(ctx context.Context, agg aggregator.Interface) error {
	svcs := agg.ApiregistrationV1().APIServices()
	got, err := svcs.Get(ctx, APIServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ours(got) {
		return nil
	}
	err = svcs.Delete(ctx, APIServiceName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &got.UID}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
