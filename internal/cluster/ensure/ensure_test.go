package ensure

import (
	"context"
	"errors"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func role(verb string) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "r"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{verb}}}}
}

func verb(t *testing.T, c *fake.Clientset) string {
	t.Helper()
	got, err := c.RbacV1().ClusterRoles().Get(context.Background(), "r", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Rules[0].Verbs[0]
}

func TestObjectCreatesThenUpdatesCreatedKeeps(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	roles := c.RbacV1().ClusterRoles()
	if err := Object(ctx, roles, role("get"), "cluster role r"); err != nil || verb(t, c) != "get" {
		t.Fatalf("create: %v", err)
	}
	if err := Object(ctx, roles, role("list"), "cluster role r"); err != nil || verb(t, c) != "list" {
		t.Fatalf("update: %v, verb %s", err, verb(t, c))
	}
	if err := Created(ctx, roles, role("watch"), "cluster role r"); err != nil || verb(t, c) != "list" {
		t.Fatalf("Created changed an existing object: %v, verb %s", err, verb(t, c))
	}
	c.PrependReactor("create", "clusterroles", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("refused")
	})
	if err := Object(ctx, roles, role("get"), "cluster role r"); err == nil || err.Error() != "cluster role r: refused" {
		t.Errorf("error %v, want it to name the object", err)
	}
}
