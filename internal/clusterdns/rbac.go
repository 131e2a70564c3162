package clusterdns

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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
	for _, create := range []func() error{
		func() error { _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); return err },
		func() error {
			_, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.Roles("kube-system").Create(ctx, nsRole, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := rbac.RoleBindings("kube-system").Create(ctx, nsBinding, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("RBAC %s for nodes' DNS: %w", nodeRole, err)
		}
	}
	return nil
}
