package bootstrap

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/podvisor/podvisor/internal/cluster/ensure"
)

// ClusterInfo is the kubeconfig published in kube-public/cluster-info: the
// API server's address and CA, no credentials.
func ClusterInfo(server string, caPEM []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[""] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	return clientcmd.Write(*cfg)
}

// EnsureClusterObjects creates (or updates) what joining nodes need, as
// kubeadm's bootstrap-token phase does: cluster-info readable anonymously,
// and the bindings of the built-in roles for node bootstrap and renewal.
func EnsureClusterObjects(ctx context.Context, c kubernetes.Interface, server string, caPEM []byte) error {
	kc, err := ClusterInfo(server, caPEM)
	if err != nil {
		return err
	}
	if err := ensureClusterInfo(ctx, c, string(kc)); err != nil {
		return fmt.Errorf("kube-public/cluster-info: %w", err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "podvisor:bootstrap-signer-clusterinfo", Namespace: metav1.NamespacePublic},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{bootstrapapi.ConfigMapClusterInfo}, Verbs: []string{"get"}}},
	}
	if err := ensure.Created(ctx, c.RbacV1().Roles(role.Namespace), role, "role "+role.Name); err != nil {
		return err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: role.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:anonymous"}},
	}
	if err := ensure.Created(ctx, c.RbacV1().RoleBindings(rb.Namespace), rb, "role binding "+rb.Name); err != nil {
		return err
	}
	for _, b := range []struct{ name, role, group string }{
		// A token holder may create a CSR…
		{"podvisor:kubelet-bootstrap", "system:node-bootstrapper", bootstrapapi.BootstrapDefaultGroup},
		// …which the controller manager's approver approves for a node client certificate…
		{"podvisor:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrapapi.BootstrapDefaultGroup},
		// …and a node may renew its own.
		{"podvisor:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"},
	} {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: b.group}},
		}
		if err := ensure.Created(ctx, c.RbacV1().ClusterRoleBindings(), crb, "cluster role binding "+b.name); err != nil {
			return err
		}
	}
	return nil
}

// ensureClusterInfo writes the kubeconfig key and keeps the signatures the
// bootstrap signer added, unless the kubeconfig changed (then it re-signs).
func ensureClusterInfo(ctx context.Context, c kubernetes.Interface, kubeconfig string) error {
	cms := c.CoreV1().ConfigMaps(metav1.NamespacePublic)
	cm, err := cms.Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &v1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: bootstrapapi.ConfigMapClusterInfo, Namespace: metav1.NamespacePublic},
			Data:       map[string]string{bootstrapapi.KubeConfigKey: kubeconfig},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if cm.Data[bootstrapapi.KubeConfigKey] == kubeconfig {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[bootstrapapi.KubeConfigKey] = kubeconfig
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
