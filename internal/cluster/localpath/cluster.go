package localpath

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/podvisor/podvisor/internal/cluster/ensure"
)

// nodeRole is what a node's provisioner needs with the node's own
// credentials (a joined agent): the Node authorizer grants a node only the
// claims and volumes of its pods, read-only.
const nodeRole = "podvisor:local-path-provisioner"

// EnsureClusterObjects makes the default StorageClass, unless one named
// local-path exists (the user's edits stay), and lets every node run the
// provisioner. The server calls it.
func EnsureClusterObjects(ctx context.Context, c kubernetes.Interface) error {
	if err := ensure.Created(ctx, c.StorageV1().StorageClasses(), DefaultStorageClass(), "StorageClass "+StorageClassName); err != nil {
		return err
	}
	rw := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: nodeRole, Labels: map[string]string{"app.kubernetes.io/managed-by": "podvisor"}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: rw},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: nodeRole, Labels: role.Labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: nodeRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}
	if err := ensure.Object(ctx, c.RbacV1().ClusterRoles(), role, "cluster role "+nodeRole); err != nil {
		return err
	}
	return ensure.Created(ctx, c.RbacV1().ClusterRoleBindings(), binding, "cluster role binding "+nodeRole)
}
