package localpath

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// nodeRole is what a node's provisioner needs with the node's own
// credentials (a joined agent): the Node authorizer grants a node only the
// claims and volumes of its pods, read-only.
const nodeRole = "podvisor:local-path-provisioner"

// EnsureClusterObjects makes the default StorageClass, unless one named
// local-path exists (the user's edits stay), and lets every node run the
// provisioner. The server calls it.
func EnsureClusterObjects(ctx context.Context, c kubernetes.Interface) error {
	_, err := c.StorageV1().StorageClasses().Create(ctx, DefaultStorageClass(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("StorageClass %s: %w", StorageClassName, err)
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
	rbac := c.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = rbac.ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("cluster role %s: %w", nodeRole, err)
		}
	} else if err != nil {
		return fmt.Errorf("cluster role %s: %w", nodeRole, err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("cluster role binding %s: %w", nodeRole, err)
	}
	return nil
}
