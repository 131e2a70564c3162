package podworker

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
)

func tokenPod(name string) *v1.Pod {
	pod := testPod(name)
	pod.Spec.Volumes = []v1.Volume{{Name: "kube-api-access-x", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}}}}}}
	return pod
}

// refuseTokens makes the first n token requests fail as NodeRestriction does
// while its cache has not seen the pod's binding; it counts the requests.
func refuseTokens(w *worker, n int32, calls *atomic.Int32) {
	cs := w.m.cfg.Client.(interface {
		PrependReactor(verb, resource string, reaction clienttesting.ReactionFunc)
	})
	cs.PrependReactor("create", "serviceaccounts", func(a clienttesting.Action) (bool, k8sruntime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		if calls.Add(1) <= n {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, "default",
				errString("node requested token bound to a pod scheduled on a different node"))
		}
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{
			Token: "tok", ExpirationTimestamp: metav1.Now()}}, nil
	})
}

type errString string

func (e errString) Error() string { return string(e) }

// Issue 18 item 7: the API server refuses a token for a pod it has not caught
// up with yet; the mount waits for it instead of failing and leaving the
// container idle for the 10 s retry.
func TestTokenRefusedWhileTheAPIServerLagsIsWaitedFor(t *testing.T) {
	pod := tokenPod("lag")
	w, _, rec := volumeWorker(t, pod)
	w.m.workers[pod.UID] = w
	var calls atomic.Int32
	refuseTokens(w, 3, &calls)
	paths, err := w.m.vols.SetUp(context.Background(), pod, w.podDir())
	if err != nil {
		t.Fatalf("setup: %v (after %d token requests)", err, calls.Load())
	}
	if b, _ := os.ReadFile(filepath.Join(paths["kube-api-access-x"], "token")); string(b) != "tok" {
		t.Errorf("token = %q", b)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("%d token requests, want 4 (3 refused)", n)
	}
	select {
	case ev := <-rec.Events:
		t.Errorf("unexpected event %q", ev)
	default:
	}
}

// A pod being deleted does not wait: its containers will not start anyway.
func TestTokenRefusalForAPodBeingDeletedFailsTheMount(t *testing.T) {
	pod := tokenPod("gone")
	w, _, rec := volumeWorker(t, pod)
	w.m.workers[pod.UID] = w
	w.markGone()
	var calls atomic.Int32
	refuseTokens(w, 100, &calls)
	if _, err := w.m.vols.SetUp(context.Background(), pod, w.podDir()); err == nil {
		t.Fatal("setup succeeded")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d token requests, want 1", n)
	}
	if ev := <-rec.Events; ev == "" {
		t.Error("no FailedMount event")
	}
}

// A ConfigMap the node authorizer does not yet relate to the node (its graph
// lags) is read again until it does.
func TestConfigMapRefusedWhileTheAPIServerLagsIsWaitedFor(t *testing.T) {
	pod := testPod("cmlag")
	pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}}}
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"k": "v"}}
	w, cs, _ := volumeWorker(t, pod, cm)
	w.m.workers[pod.UID] = w
	var calls atomic.Int32
	cs.PrependReactor("get", "configmaps", func(clienttesting.Action) (bool, k8sruntime.Object, error) {
		if calls.Add(1) <= 2 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "cm",
				errString("no relationship found between node 'n' and this object"))
		}
		return false, nil, nil
	})
	paths, err := w.m.vols.SetUp(context.Background(), pod, w.podDir())
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(paths["cfg"], "k")); string(b) != "v" {
		t.Errorf("k = %q", b)
	}
}
