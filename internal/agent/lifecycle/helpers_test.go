package lifecycle

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Builders shared by the tests: a pod p in namespace ns with UID u, times
// relative to t0.

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const ref = "p_ns(u)"

type podOpt func(*v1.Pod)

func newPod(opts ...podOpt) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func containers(names ...string) podOpt {
	return func(p *v1.Pod) {
		for _, n := range names {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "img-" + n})
		}
	}
}

func inits(names ...string) podOpt {
	return func(p *v1.Pod) {
		for _, n := range names {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "img-" + n})
		}
	}
}

func sidecars(names ...string) podOpt {
	return func(p *v1.Pod) {
		for _, n := range names {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{
				Name: n, Image: "img-" + n, RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways)})
		}
	}
}

func policy(rp v1.RestartPolicy) podOpt { return func(p *v1.Pod) { p.Spec.RestartPolicy = rp } }

func published(phase v1.PodPhase, reason string) podOpt {
	return func(p *v1.Pod) { p.Status.Phase, p.Status.Reason = phase, reason }
}

// modify changes the named container (init or regular).
func modify(name string, f func(*v1.Container)) podOpt {
	return func(p *v1.Pod) {
		for i := range p.Spec.InitContainers {
			if p.Spec.InitContainers[i].Name == name {
				f(&p.Spec.InitContainers[i])
			}
		}
		for i := range p.Spec.Containers {
			if p.Spec.Containers[i].Name == name {
				f(&p.Spec.Containers[i])
			}
		}
	}
}

func startupProbe(c *v1.Container)   { c.StartupProbe = &v1.Probe{} }
func readinessProbe(c *v1.Container) { c.ReadinessProbe = &v1.Probe{} }

func running(id string, attempt int32) *Instance {
	return &Instance{ID: "podvisor://" + id, Attempt: attempt, State: StateRunning, StartedAt: t0, PostStartDone: true}
}

func exited(id string, attempt, code int32) *Instance {
	return &Instance{ID: "podvisor://" + id, Attempt: attempt, State: StateExited, ExitCode: code,
		StartedAt: t0, FinishedAt: t0.Add(time.Second)}
}

func rec(cur *Instance) ContainerRecord { return ContainerRecord{Current: cur} }

type recs map[string]ContainerRecord

func snap(p *v1.Pod, r recs, mods ...func(*Snapshot)) Snapshot {
	s := Snapshot{
		Pod: p, Now: t0.Add(2 * time.Second), Config: DefaultConfig(), SandboxReady: true,
		HostIP: "10.0.0.1", PodIP: "10.0.0.1", Containers: r,
	}
	for _, m := range mods {
		m(&s)
	}
	return s
}

func at(t time.Time) func(*Snapshot) { return func(s *Snapshot) { s.Now = t } }

func probes(m map[string]ProbeState) func(*Snapshot) {
	return func(s *Snapshot) { s.Probes = m }
}

func terminating(t Termination) func(*Snapshot) { return func(s *Snapshot) { s.Termination = &t } }

func status(t *testing.T, p Plan, name string) v1.ContainerStatus {
	t.Helper()
	if st := statusOf(p.Status.InitContainerStatuses, name); st != nil {
		return *st
	}
	if st := statusOf(p.Status.ContainerStatuses, name); st != nil {
		return *st
	}
	t.Fatalf("no status for %s", name)
	return v1.ContainerStatus{}
}

func condition(t *testing.T, p Plan, ct v1.PodConditionType) v1.PodCondition {
	t.Helper()
	c := conditionOf(p.Status.Conditions, ct)
	if c == nil {
		t.Fatalf("no condition %s in %v", ct, p.Status.Conditions)
	}
	return *c
}

// actionsString prints actions compactly: "start c1#0 kill c2(30s)".
func actionsString(as []Action) string {
	out := ""
	for i, a := range as {
		if i > 0 {
			out += " "
		}
		switch a.Kind {
		case ActionStart:
			out += fmt.Sprintf("start %s#%d", a.Container, a.Attempt)
		case ActionKill:
			out += fmt.Sprintf("kill %s(%s)", a.Container, a.Grace)
			if a.Resize {
				out += "[resize]"
			}
		case ActionReset:
			out += "reset " + a.Container
		case ActionRunSandbox:
			out += "sandbox"
		case ActionResize:
			out += "resize " + a.Container
		default:
			out += "?" + a.Container
		}
	}
	return out
}

// stateString prints a container state compactly: "waiting:PodInitializing",
// "running", "terminated:Error(1)".
func stateString(s v1.ContainerState) string {
	switch {
	case s.Waiting != nil:
		return "waiting:" + s.Waiting.Reason
	case s.Running != nil:
		return "running"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated:%s(%d)", s.Terminated.Reason, s.Terminated.ExitCode)
	}
	return "none"
}
