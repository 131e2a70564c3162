package controlplane

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/podvisor/podvisor/internal/cluster/ensure"
)

// nodeNetworkRole lets nodes read every Node: each agent's pod network
// (internal/cluster/podnet, flannel's subnet manager) routes to the other nodes'
// pod CIDRs and learns them from their Nodes. The Node authorizer of
// Kubernetes v1.36 lets a node read only its own Node (AuthorizeNodeWithSelectors)
// and leaves the rest to RBAC; writes stay limited to the node's own Node
// by the Node authorizer and NodeRestriction.
const nodeNetworkRole = "podvisor:node-network"

// nodeProxierBinding gives nodes the upstream system:node-proxier role
// (read Services, EndpointSlices, Nodes; write events): a joined agent runs
// its service proxy with the node's own credentials.
const nodeProxierBinding = "podvisor:node-proxier"

var managedBy = map[string]string{"app.kubernetes.io/managed-by": "podvisor"}

// ensureRBAC creates or updates podvisor's own roles and bindings.
func ensureRBAC(ctx context.Context, c kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: nodeNetworkRole, Labels: managedBy}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"},
	}}}
	if err := ensure.Object(ctx, c.RbacV1().ClusterRoles(), role, "cluster role "+nodeNetworkRole); err != nil {
		return err
	}
	for name, roleName := range map[string]string{nodeNetworkRole: nodeNetworkRole, nodeProxierBinding: "system:node-proxier"} {
		if err := ensureNodesBinding(ctx, c, name, roleName); err != nil {
			return err
		}
	}
	return nil
}

// ensureNodesBinding binds a cluster role to every node (group system:nodes).
func ensureNodesBinding(ctx context.Context, c kubernetes.Interface, name, role string) error {
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managedBy},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}
	return ensure.Object(ctx, c.RbacV1().ClusterRoleBindings(), binding, "cluster role binding "+name)
}
