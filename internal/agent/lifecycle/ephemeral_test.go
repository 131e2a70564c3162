package lifecycle

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func addEphemeral(m *sim, name string) {
	m.s.Pod = m.s.Pod.DeepCopy()
	m.s.Pod.Spec.EphemeralContainers = append(m.s.Pod.Spec.EphemeralContainers, v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: name, Image: "busybox"}, TargetContainerName: "app"})
}

func ephemeralStatus(t *testing.T, p Plan, name string) v1.ContainerStatus {
	t.Helper()
	for _, st := range p.Status.EphemeralContainerStatuses {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no ephemeral container status %s in %+v", name, p.Status.EphemeralContainerStatuses)
	return v1.ContainerStatus{}
}

// kubectl debug adds an ephemeral container to a running pod: it starts
// once, is never restarted whatever its exit, shows in
// ephemeralContainerStatuses only (not in the phase or readiness), and is
// stopped with the pod.
func TestEphemeralContainer(t *testing.T) {
	m := newSim(t, newPod(grace(4), containers("app")), DefaultConfig())
	m.settle(5)
	addEphemeral(m, "debug")
	m.step()
	m.expectActions("start debug#0")
	if st := ephemeralStatus(t, m.plan, "debug"); st.State.Waiting == nil {
		t.Fatalf("debug %s while starting", stateString(st.State))
	}
	m.step()
	if st := ephemeralStatus(t, m.plan, "debug"); st.State.Running == nil || st.Ready {
		t.Fatalf("debug %s ready=%v, want running, never ready", stateString(st.State), st.Ready)
	}
	if len(m.plan.Status.ContainerStatuses) != 1 || condition(t, m.plan, v1.PodReady).Status != v1.ConditionTrue {
		t.Fatalf("the ephemeral container changed the regular statuses or readiness: %+v", m.plan.Status.Conditions)
	}
	m.exit("debug", 1)
	m.step()
	m.expectActions("")
	if got := stateString(ephemeralStatus(t, m.plan, "debug").State); got != "terminated:Error(1)" {
		t.Fatalf("debug %s after exit 1, want terminated (never restarted)", got)
	}
	if m.phase() != v1.PodRunning {
		t.Fatalf("phase %s after the ephemeral container's exit", m.phase())
	}

	addEphemeral(m, "debug2")
	m.step()
	m.expectActions("start debug2#0")
	m.step()
	m.s.Termination = &Termination{Since: m.s.Now, Grace: 4e9}
	m.step()
	m.expectActions("kill app(4s) kill debug2(4s)")
	m.settle(5)
	if !m.plan.Done {
		t.Fatal("pod not done after its containers stopped")
	}
}

// An ephemeral container starts while init containers still run.
func TestEphemeralContainerBeforeInitialization(t *testing.T) {
	m := newSim(t, newPod(inits("init"), containers("app")), DefaultConfig())
	m.settle(5)
	addEphemeral(m, "debug")
	m.step()
	m.expectActions("start debug#0")
}
