// Package servicetraffic holds what the e2e tests and the benchmarks of
// Service traffic (issue 26) share: reading a pod's endpoint conditions and
// a Deployment's rollout from the API, driving `testserver load` in a client
// pod, and timing how soon a pod whose readiness fails stops being routed.
// Callers bring the node (its client, its kubectl) and their own deadlines.
package servicetraffic

import (
	"context"
	"fmt"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/cluster/serviceproxy"
)

// ProxyLock is the file whose flock the one test or benchmark of this
// machine that runs a service proxy holds: kube-proxies of one network
// namespace would rewrite each other's tables.
const ProxyLock = "/tmp/podvisor-e2e-service-proxy.lock"

// ModeFromLog is the backend a podvisor's log says its proxy chose.
func ModeFromLog(log string) serviceproxy.Mode {
	if strings.Contains(log, "mode=nftables") {
		return serviceproxy.NFTables
	}
	return serviceproxy.IPTables
}

// EndpointConditions are pod's endpoint conditions in the Service's
// EndpointSlices, nil while it has none.
func EndpointConditions(ctx context.Context, cs kubernetes.Interface, ns, service, pod string) (*discoveryv1.EndpointConditions, error) {
	slices, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return nil, err
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Name == pod {
				return &e.Conditions, nil
			}
		}
	}
	return nil, nil
}

// RolledOut reports whether the Deployment's rollout is complete and its
// old pods are gone: every pod of it is of its current template and ready,
// none terminating. The error says what is missing.
func RolledOut(ctx context.Context, cs kubernetes.Interface, ns, name string) (bool, error) {
	d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	st := d.Status
	if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
		return false, fmt.Errorf("status %+v", st)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return false, err
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return false, err
	}
	if int32(len(pods.Items)) != want {
		return false, fmt.Errorf("%d pods, want %d", len(pods.Items), want)
	}
	return true, nil
}
