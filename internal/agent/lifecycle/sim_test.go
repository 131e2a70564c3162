package lifecycle

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// sim drives Compute as a worker would, with a runtime that does what it is
// told at once: a start creates a running instance (postStart done), a kill
// makes the instance exit 137. Tests then read as scripts:
// step, exit c 1, advance 10s, step, … (the golden-script style of style.md).
type sim struct {
	t    *testing.T
	s    Snapshot
	ids  int
	plan Plan
	log  []Event
}

func newSim(t *testing.T, p *v1.Pod, cfg Config) *sim {
	return &sim{t: t, s: Snapshot{
		Pod: p, Now: t0, Config: cfg, SandboxReady: true, HostIP: "10.0.0.1", PodIP: "10.0.0.1",
		Containers: map[string]ContainerRecord{}, Probes: map[string]ProbeState{},
	}}
}

// step runs Compute, carries out its actions and publishes its status.
func (m *sim) step() Plan {
	m.t.Helper()
	p := Compute(m.s)
	m.plan = p
	m.s.BackOff = p.BackOff
	m.s.Pod = m.s.Pod.DeepCopy()
	m.s.Pod.Status = p.Status
	m.log = append(m.log, p.Events...)
	for _, a := range p.Actions {
		r := m.s.Containers[a.Container]
		switch a.Kind {
		case ActionStart:
			m.ids++
			r.Previous = r.Current
			r.Current = &Instance{ID: fmt.Sprintf("podvisor://%d", m.ids), Attempt: a.Attempt,
				State: StateRunning, StartedAt: m.s.Now, PostStartDone: true}
			r.Waiting = nil
		case ActionKill:
			cur := *r.Current
			cur.State, cur.ExitCode, cur.FinishedAt = StateExited, 137, m.s.Now
			r.Current = &cur
		case ActionReset:
			r = ContainerRecord{}
		case ActionRunSandbox:
			m.s.SandboxReady = true
			continue
		}
		m.s.Containers[a.Container] = r
	}
	return p
}

func (m *sim) exit(name string, code int32) {
	m.t.Helper()
	r := m.s.Containers[name]
	if r.Current == nil || r.Current.State != StateRunning {
		m.t.Fatalf("exit %s: not running", name)
	}
	cur := *r.Current
	cur.State, cur.ExitCode, cur.FinishedAt = StateExited, code, m.s.Now
	r.Current = &cur
	m.s.Containers[name] = r
}

// sandboxDies: the pod's sandbox stops behind the agent's back; its
// containers keep running until stopped.
func (m *sim) sandboxDies() {
	m.s.SandboxReady = false
	for name, r := range m.s.Containers {
		for _, in := range []**Instance{&r.Current, &r.Previous} {
			if *in != nil {
				c := **in
				c.OldSandbox = true
				*in = &c
			}
		}
		m.s.Containers[name] = r
	}
}

func (m *sim) advance(d time.Duration) { m.s.Now = m.s.Now.Add(d) }

func (m *sim) phase() v1.PodPhase { return m.plan.Status.Phase }

func (m *sim) status(name string) v1.ContainerStatus {
	m.t.Helper()
	return status(m.t, m.plan, name)
}

// expectActions checks the actions of the last step.
func (m *sim) expectActions(want string) {
	m.t.Helper()
	if got := actionsString(m.plan.Actions); got != want {
		m.t.Fatalf("at +%s: actions = %q, want %q", m.s.Now.Sub(t0), got, want)
	}
}
