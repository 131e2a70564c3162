package clusterdns

import (
	"context"
	"errors"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/podvisor/podvisor/internal/cluster/ensure"
)

// nodeRole is what a node's DNS needs with the node's own credentials: to
// read what the kubernetes plugin serves (as upstream's system:coredns
// role) and the coredns-custom ConfigMap, and to publish its endpoint. The
// node authorizer grants none of it.
const nodeRole = "podvisor:cluster-dns"

// ensureNodeAccess binds nodeRole to every node (group system:nodes).
func ensureNodeAccess(ctx context.Context, c kubernetes.Interface) error {
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: nodeRole},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "endpoints", "pods", "namespaces"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: nodeRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: nodeRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:nodes"}},
	}
	// In kube-system only: the custom ConfigMap (a list or watch naming it
	// with metadata.name is authorized by resource name), and the slices.
	nsRole := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: nodeRole, Namespace: "kube-system"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{CustomConfigMap}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"create", "update", "delete"}},
		},
	}
	nsBinding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: nodeRole, Namespace: "kube-system"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: nodeRole},
		Subjects:   binding.Subjects,
	}
	rbac := c.RbacV1()
	what := "RBAC " + nodeRole + " for nodes' DNS"
	return errors.Join(
		ensure.Object(ctx, rbac.ClusterRoles(), role, what),
		ensure.Object(ctx, rbac.ClusterRoleBindings(), binding, what),
		ensure.Object(ctx, rbac.Roles("kube-system"), nsRole, what),
		ensure.Object(ctx, rbac.RoleBindings("kube-system"), nsBinding, what))
}
