// Package ensure makes the API objects podvisor owns (its RBAC roles and
// bindings, add-on objects) exist: Object makes one exist as podvisor wants
// it, Created makes one exist and leaves an existing one as it is. One
// spelling of create-or-update for every typed client of client-go.
package ensure

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Client is the part of a typed client-go client (ClusterRoles(),
// RoleBindings(ns), StorageClasses(), …) that ensure uses.
type Client[T any] interface {
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// Object creates obj, or updates the existing object to it: podvisor owns
// it, and a newer podvisor may want other rules. what names it in the
// error ("cluster role x").
func Object[T any](ctx context.Context, c Client[T], obj T, what string) error {
	_, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = c.Update(ctx, obj, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Created creates obj unless it exists; an existing one is left as it is
// (a default the user may have changed).
func Created[T any](ctx context.Context, c Client[T], obj T, what string) error {
	if _, err := c.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
