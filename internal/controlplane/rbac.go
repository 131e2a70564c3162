package controlplane

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// nodeNetworkRole lets nodes read every Node: each agent's pod network
// (internal/podnet, flannel's subnet manager) routes to the other nodes'
// pod CIDRs and learns them from their Nodes. The Node authorizer of
// Kubernetes v1.36 lets a node read only its own Node (AuthorizeNodeWithSelectors)
// and leaves the rest to RBAC; writes stay limited to the node's own Node
// by the Node authorizer and NodeRestriction.
const nodeNetworkRole = "podvisor:node-network"

// ensureRBAC creates or updates podvisor's own roles and bindings.
func ensureRBAC(ctx context.Context, c kubernetes.Interface) error {
	meta := metav1.ObjectMeta{Name: nodeNetworkRole, Labels: map[string]string{"app.kubernetes.io/managed-by": "podvisor"}}
	role := &rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"},
	}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: meta,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: nodeNetworkRole},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}
	roles, bindings := c.RbacV1().ClusterRoles(), c.RbacV1().ClusterRoleBindings()
	_, err := roles.Create(ctx, role, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = roles.Update(ctx, role, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("cluster role %s: %w", nodeNetworkRole, err)
	}
	_, err = bindings.Create(ctx, binding, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = bindings.Update(ctx, binding, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("cluster role binding %s: %w", nodeNetworkRole, err)
	}
	return nil
}
