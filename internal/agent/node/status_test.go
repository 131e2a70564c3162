package node

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func healthy() Machine {
	return Machine{CPUs: 2, MemoryTotal: 8 << 30, DiskTotal: 100 << 30}
}

func statusOf(conds []v1.NodeCondition, t v1.NodeConditionType) v1.NodeCondition {
	for _, c := range conds {
		if c.Type == t {
			return c
		}
	}
	return v1.NodeCondition{}
}

func TestConditionsFollowTheMachine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pressure []v1.NodeConditionType
		cond     v1.NodeConditionType
		want     v1.ConditionStatus
		why      string
		msg      string
	}{
		{"healthy memory", nil, v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{"memory pressure", []v1.NodeConditionType{v1.NodeMemoryPressure}, v1.NodeMemoryPressure, v1.ConditionTrue, "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"},
		{"disk pressure", []v1.NodeConditionType{v1.NodeDiskPressure}, v1.NodeDiskPressure, v1.ConditionTrue, "KubeletHasDiskPressure", "kubelet has disk pressure"},
		{"no disk pressure", []v1.NodeConditionType{v1.NodeMemoryPressure}, v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{"pid pressure", []v1.NodeConditionType{v1.NodePIDPressure}, v1.NodePIDPressure, v1.ConditionTrue, "KubeletHasInsufficientPID", "kubelet has insufficient PID available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := statusOf(conditions(StatusInput{Machine: healthy(), MaxPods: 110, Readiness: Readiness{Ready: true}, Pressure: tc.pressure}), tc.cond)
			if c.Status != tc.want || c.Reason != tc.why || c.Message != tc.msg {
				t.Errorf("%s = %s/%s/%s, want %s/%s/%s", tc.cond, c.Status, c.Reason, c.Message, tc.want, tc.why, tc.msg)
			}
		})
	}
}

func TestReadyConditionFollowsReadiness(t *testing.T) {
	c := statusOf(conditions(StatusInput{Machine: healthy(), Readiness: Readiness{Ready: true}}), v1.NodeReady)
	if c.Status != v1.ConditionTrue || c.Reason != "KubeletReady" || c.Message != "kubelet is posting ready status" {
		t.Errorf("ready = %+v", c)
	}
	c = statusOf(conditions(StatusInput{Machine: healthy(), Readiness: Readiness{Message: "node is shutting down"}}), v1.NodeReady)
	if c.Status != v1.ConditionFalse || c.Reason != "KubeletNotReady" || c.Message != "node is shutting down" {
		t.Errorf("not ready = %+v", c)
	}
}

func TestAllocatableSubtractsEvictionThresholds(t *testing.T) {
	capacity, alloc := resources(StatusInput{Machine: healthy(), MaxPods: 110})
	if pods := capacity[v1.ResourcePods]; pods.Value() != 110 {
		t.Errorf("pods = %s", pods.String())
	}
	mem := alloc[v1.ResourceMemory]
	if mem.Value() != 8<<30-100<<20 {
		t.Errorf("allocatable memory = %d", mem.Value())
	}
	disk := alloc[v1.ResourceEphemeralStorage]
	// 10% as upstream computes it: a float32 fraction of the capacity.
	if want := int64(100<<30) - int64(float64(100<<30)*float64(float32(0.1))); disk.Value() != want {
		t.Errorf("allocatable ephemeral-storage = %d", disk.Value())
	}
}

func TestTransitionTimeChangesOnlyWithStatus(t *testing.T) {
	t0 := metav1.NewTime(time.Unix(1000, 0))
	t1 := metav1.NewTime(time.Unix(2000, 0))
	first, changed := mergeConditions(nil, conditions(StatusInput{Machine: healthy(), Readiness: Readiness{Ready: true}}), t0, true)
	if !changed {
		t.Fatal("first write must count as a change")
	}
	same, changed := mergeConditions(first, conditions(StatusInput{Machine: healthy(), Readiness: Readiness{Ready: true}}), t1, true)
	if changed {
		t.Error("nothing changed but a change was reported")
	}
	if r := statusOf(same, v1.NodeReady); !r.LastTransitionTime.Equal(&t0) || !r.LastHeartbeatTime.Equal(&t1) {
		t.Errorf("unchanged Ready: transition %v (want %v), heartbeat %v (want %v)", r.LastTransitionTime, t0, r.LastHeartbeatTime, t1)
	}
	flipped, changed := mergeConditions(same, conditions(StatusInput{Machine: healthy(), Readiness: Readiness{Message: "x"}}), t1, false)
	if r := statusOf(flipped, v1.NodeReady); !changed || !r.LastTransitionTime.Equal(&t1) {
		t.Errorf("flipped Ready: changed %v, transition %v", changed, r.LastTransitionTime)
	}
	others := append(flipped, v1.NodeCondition{Type: "NetworkUnavailable", Status: v1.ConditionFalse})
	kept, _ := mergeConditions(others, conditions(StatusInput{Machine: healthy(), Readiness: Readiness{Ready: true}}), t1, false)
	if statusOf(kept, "NetworkUnavailable").Type == "" {
		t.Error("a condition of another writer was dropped")
	}
}

// The node declares exactly the features the agent implements (KEP-5328), so
// that the scheduler places pods with RestartAllContainers rules here and
// the API server passes WebSocket exec and port-forward through.
func TestDeclaredFeaturesAreWhatTheAgentImplements(t *testing.T) {
	got := declaredFeatures()
	want := []string{"ExtendWebSocketsToKubelet", "RestartAllContainersOnContainerExits"}
	if !slices.Equal(got, want) {
		t.Fatalf("declaredFeatures = %v, want %v", got, want)
	}
}
