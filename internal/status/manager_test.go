package status

import (
	"context"
	"log/slog"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
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
