package status

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func cond(t v1.PodConditionType, s v1.ConditionStatus) v1.PodCondition {
	return v1.PodCondition{Type: t, Status: s}
}

func TestMergeKeepsConditionsOfOthers(t *testing.T) {
	api := v1.PodStatus{Phase: v1.PodPending, Conditions: []v1.PodCondition{
		cond(v1.PodScheduled, v1.ConditionTrue),
		cond("example.com/gate", v1.ConditionTrue),
		cond(v1.PodReady, v1.ConditionFalse),
	}}
	agent := v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{
		cond(v1.PodReady, v1.ConditionTrue),
		cond(v1.ContainersReady, v1.ConditionTrue),
	}}
	got := Merge(api, agent)
	want := map[v1.PodConditionType]v1.ConditionStatus{
		v1.PodReady: v1.ConditionTrue, v1.ContainersReady: v1.ConditionTrue,
		v1.PodScheduled: v1.ConditionTrue, "example.com/gate": v1.ConditionTrue,
	}
	if len(got.Conditions) != len(want) {
		t.Fatalf("conditions = %+v", got.Conditions)
	}
	for _, c := range got.Conditions {
		if want[c.Type] != c.Status {
			t.Errorf("%s = %s, want %s", c.Type, c.Status, want[c.Type])
		}
	}
	if got.Phase != v1.PodRunning {
		t.Errorf("phase = %s", got.Phase)
	}
}

func TestMergeNeverMovesATerminalPhaseBack(t *testing.T) {
	got := Merge(v1.PodStatus{Phase: v1.PodSucceeded}, v1.PodStatus{Phase: v1.PodRunning})
	if got.Phase != v1.PodSucceeded {
		t.Errorf("phase = %s, want Succeeded kept", got.Phase)
	}
}

func TestMergeAgentDisruptionTargetWins(t *testing.T) {
	api := v1.PodStatus{Conditions: []v1.PodCondition{cond(v1.DisruptionTarget, v1.ConditionFalse)}}
	agent := v1.PodStatus{Conditions: []v1.PodCondition{cond(v1.DisruptionTarget, v1.ConditionTrue)}}
	got := Merge(api, agent)
	if len(got.Conditions) != 1 || got.Conditions[0].Status != v1.ConditionTrue {
		t.Errorf("conditions = %+v", got.Conditions)
	}
}

// The newest status of a burst is written, and a finished pod is deleted
// with grace 0 once its final status is written.
func TestWritesNewestAndDeletesAfter(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	client := fake.NewClientset(pod)
	m := New(client, func(types.UID) (*v1.Pod, bool) { return nil, false }, slog.Default())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, phase := range []v1.PodPhase{v1.PodPending, v1.PodRunning, v1.PodSucceeded} {
		m.Set(pod, v1.PodStatus{Phase: phase}, false)
	}
	go m.Run(ctx, 2)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		got, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
		if err == nil && got.Status.Phase == v1.PodSucceeded {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	if err != nil || got.Status.Phase != v1.PodSucceeded {
		t.Fatalf("status = %+v, %v; want Succeeded", got, err)
	}
	deleted := make(chan types.UID, 1)
	m.OnDeleted = func(uid types.UID) { deleted <- uid }
	m.Set(got, v1.PodStatus{Phase: v1.PodSucceeded}, true)
	select {
	case uid := <-deleted:
		if uid != "u1" {
			t.Errorf("deleted %s", uid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pod not deleted after its final status")
	}
	if _, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{}); err == nil {
		t.Error("pod still exists")
	}
}

// PodScheduled is the scheduler's until the agent writes its own (True, with
// the generation it observed): then the agent's replaces it.
func TestMergePodScheduledOfTheAgentWins(t *testing.T) {
	api := v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, ObservedGeneration: 1}}}
	agent := v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, ObservedGeneration: 2}}}
	got := Merge(api, agent)
	if len(got.Conditions) != 1 || got.Conditions[0].ObservedGeneration != 2 {
		t.Errorf("agent's PodScheduled should replace the API's: %+v", got.Conditions)
	}
	got = Merge(api, v1.PodStatus{})
	if len(got.Conditions) != 1 || got.Conditions[0].ObservedGeneration != 1 {
		t.Errorf("without one of the agent's, the API's PodScheduled stays: %+v", got.Conditions)
	}
}

// The API refuses a status that moves a container out of terminated unless
// it could restart; such containers keep the API's state (table from the
// API server's ValidateContainerStateTransition).
func TestKeepTerminated(t *testing.T) {
	never, always := ptr.To(v1.ContainerRestartPolicyNever), ptr.To(v1.ContainerRestartPolicyAlways)
	onFailure := ptr.To(v1.ContainerRestartPolicyOnFailure)
	restartOn42 := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	for _, tc := range []struct {
		name     string
		policy   v1.RestartPolicy
		c        v1.Container
		init     bool
		exitCode int32
		kept     bool
	}{
		{name: "Always", policy: v1.RestartPolicyAlways, exitCode: 0},
		{name: "default policy", exitCode: 0},
		{name: "Never", policy: v1.RestartPolicyNever, exitCode: 1, kept: true},
		{name: "OnFailure, failed", policy: v1.RestartPolicyOnFailure, exitCode: 1},
		{name: "OnFailure, succeeded", policy: v1.RestartPolicyOnFailure, exitCode: 0, kept: true},
		{name: "container Never in an Always pod", policy: v1.RestartPolicyAlways, c: v1.Container{RestartPolicy: never}, kept: true},
		{name: "container OnFailure, failed, in a Never pod", policy: v1.RestartPolicyNever, c: v1.Container{RestartPolicy: onFailure}, exitCode: 2},
		{name: "rule matches", policy: v1.RestartPolicyNever, c: v1.Container{RestartPolicy: never, RestartPolicyRules: restartOn42}, exitCode: 42},
		{name: "rule does not match", policy: v1.RestartPolicyNever, c: v1.Container{RestartPolicy: never, RestartPolicyRules: restartOn42}, exitCode: 1, kept: true},
		{name: "sidecar in a Never pod", policy: v1.RestartPolicyNever, c: v1.Container{RestartPolicy: always}, init: true},
		{name: "init container, Never pod", policy: v1.RestartPolicyNever, init: true, exitCode: 0, kept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Name = "c"
			api := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: tc.policy}}
			terminated := []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: tc.exitCode, Reason: "X"}}}}
			waiting := []v1.ContainerStatus{{Name: "c", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
			var status v1.PodStatus
			if tc.init {
				api.Spec.InitContainers = []v1.Container{tc.c}
				api.Status.InitContainerStatuses, status.InitContainerStatuses = terminated, waiting
			} else {
				api.Spec.Containers = []v1.Container{tc.c}
				api.Status.ContainerStatuses, status.ContainerStatuses = terminated, waiting
			}
			kept := KeepTerminated(api, &status)
			got := append(status.InitContainerStatuses, status.ContainerStatuses...)[0]
			if tc.kept != (len(kept) == 1) || tc.kept != (got.State.Terminated != nil) {
				t.Errorf("kept %v, state %+v; want kept %v", kept, got.State, tc.kept)
			}
		})
	}
	// Ephemeral containers never leave terminated.
	api := &v1.Pod{Status: v1.PodStatus{EphemeralContainerStatuses: []v1.ContainerStatus{{Name: "d",
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}}}}}
	status := v1.PodStatus{EphemeralContainerStatuses: []v1.ContainerStatus{{Name: "d", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
	if kept := KeepTerminated(api, &status); len(kept) != 1 || status.EphemeralContainerStatuses[0].State.Terminated == nil {
		t.Errorf("ephemeral container: kept %v, state %+v", kept, status.EphemeralContainerStatuses[0].State)
	}
}

// A status the API refuses (422) is refused on every retry: it is not
// retried, and a finished pod is deleted all the same, with the last
// status the API accepted.
func TestARefusedStatusIsNotRetriedAndTheFinishedPodDeleted(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	client := fake.NewClientset(pod)
	var updates atomic.Int32
	client.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		updates.Add(1)
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", field.ErrorList{field.Forbidden(field.NewPath("status"), "no")})
	})
	m := New(client, func(types.UID) (*v1.Pod, bool) { return nil, false }, slog.New(slog.DiscardHandler))
	deleted := make(chan types.UID, 1)
	m.OnDeleted = func(uid types.UID) { deleted <- uid }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx, 1)
	m.Set(pod, v1.PodStatus{Phase: v1.PodSucceeded}, true)
	select {
	case <-deleted:
	case <-time.After(5 * time.Second):
		t.Fatal("the finished pod was not deleted after its status was refused")
	}
	if _, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pod still there: %v", err)
	}
	if n := updates.Load(); n != 1 {
		t.Errorf("%d status updates, want 1 (no retries of a refused status)", n)
	}
}

// A pod deleted before its status was written is no longer bound to the
// node, and the node authorizer answers Forbidden, not NotFound, for it:
// nothing is left to write, and the status is dropped rather than retried
// (with a warning) every 10 s for as long as the agent runs.
func TestAStatusOfAPodTheNodeMayNoLongerReadIsDropped(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	client := fake.NewClientset()
	var gets atomic.Int32
	client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		gets.Add(1)
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p",
			errors.New("no relationship found between node 'n' and this object"))
	})
	m := New(client, func(types.UID) (*v1.Pod, bool) { return nil, false }, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx, 1)
	m.Set(pod, v1.PodStatus{Phase: v1.PodSucceeded}, true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		m.mu.Lock()
		n := len(m.pending)
		m.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status is still pending after %d reads refused with Forbidden", gets.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("%d reads of the pod, want 1", n)
	}
}
