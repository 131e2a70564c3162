package lifecycle

import (
	"fmt"
	"time"
)

// fakeRuntime carries out plans for the golden scripts as the pod worker
// and a runtime would, on the script's clock:
//   - a start creates a running instance whose postStart is done, or, for a
//     container marked start-error, one that exited 128 with StartError;
//   - a kill runs the preStop hook (for as long as the spec's sleep, cut at
//     PreStopBudget), then sends the stop signal with SIGKILL KillAfter
//     later: a process exits 143 on the signal, or 137 at SIGKILL when it
//     ignores it (ignore-term); the record is Stopping until then;
//   - a termination shortened by a second delete signals what is stopping
//     at once and brings its SIGKILL forward to the new deadline, as the
//     worker's shortenStopsLocked.
//
// Timed steps wait in pending until the clock reaches them (tick).
type fakeRuntime struct {
	ids     int
	traits  map[string]traits
	pending []pendingStop
}

// traits are how a container's process behaves, which no spec says.
type traits struct {
	ignoreTerm bool
	startError bool
	preStop    time.Duration // how long its preStop hook runs; with hasPreStop
	hasPreStop bool
}

// pendingStop is a kill in flight.
type pendingStop struct {
	container string
	grace     time.Duration
	started   time.Time // when the kill began (the preStop with it)
	signalAt  time.Time // end of preStop: the stop signal
	killAt    time.Time // SIGKILL; zero until signalled
	killBy    time.Time // the latest SIGKILL a shortened termination allows; zero: none
	signalled bool
}

// start applies an ActionStart at now and says what happened.
func (rt *fakeRuntime) start(s *Snapshot, name string, attempt int32) string {
	rt.ids++
	r := s.Containers[name]
	r.Previous = r.Current
	r.Waiting, r.WaitingSince = nil, time.Time{}
	in := &Instance{ID: fmt.Sprintf("podvisor://%d", rt.ids), Attempt: attempt, CreatedAt: s.Now, StartedAt: s.Now}
	if rt.traits[name].startError {
		in.State, in.ExitCode, in.Reason, in.FinishedAt = StateExited, 128, "StartError", s.Now
		in.Message = "exec: \"/bin/app\": no such file or directory"
	} else {
		in.State, in.PostStartDone = StateRunning, true
	}
	r.Current = in
	r.ResizeRestart = false
	s.Containers[name] = r
	// The probe manager starts afresh for each instance.
	delete(s.Probes, name)
	if in.State == StateExited {
		return fmt.Sprintf("%s: start failed (StartError, exit 128)", name)
	}
	return fmt.Sprintf("%s: started %s", name, in.ID)
}

// kill applies an ActionKill with grace at now.
func (rt *fakeRuntime) kill(s *Snapshot, name string, grace time.Duration) string {
	r := s.Containers[name]
	if r.Current == nil || r.Current.State != StateRunning {
		return name + ": kill of a container not running"
	}
	r.Stopping = true
	s.Containers[name] = r
	p := pendingStop{container: name, grace: grace, started: s.Now, signalAt: s.Now}
	msg := fmt.Sprintf("%s: stopping", name)
	if tr := rt.traits[name]; tr.hasPreStop {
		run := min(tr.preStop, PreStopBudget(grace))
		p.signalAt = s.Now.Add(run)
		msg += fmt.Sprintf(", preStop until +%s", rel(p.signalAt))
	}
	rt.pending = append(rt.pending, p)
	return msg
}

// shorten cuts every stop in flight to a termination shortened to grace at
// now: the stop signal now (the preStop hook is cut), SIGKILL at the new
// deadline if that comes earlier.
func (rt *fakeRuntime) shorten(now time.Time, grace time.Duration) []string {
	var out []string
	kill := now.Add(KillAfter(grace, 0))
	for i := range rt.pending {
		p := &rt.pending[i]
		if !p.signalled {
			p.signalAt, p.killBy = now, kill
			if rt.traits[p.container].hasPreStop {
				out = append(out, p.container+": preStop cut")
			}
		} else if kill.Before(p.killAt) {
			p.killAt = kill
			out = append(out, fmt.Sprintf("%s: SIGKILL moved to +%s", p.container, rel(kill)))
		}
	}
	return out
}

// advance runs the runtime's timed steps up to now, in time order.
func (rt *fakeRuntime) advance(s *Snapshot, now time.Time) []string {
	var out []string
	for {
		i, at := rt.next()
		if i < 0 || at.After(now) {
			break
		}
		p := &rt.pending[i]
		s.Now = at
		if !p.signalled {
			p.signalled = true
			p.killAt = at.Add(KillAfter(p.grace, at.Sub(p.started)))
			if !p.killBy.IsZero() && p.killBy.Before(p.killAt) {
				p.killAt = p.killBy
			}
			line := fmt.Sprintf("+%s %s: stop signal", rel(at), p.container)
			if !rt.traits[p.container].ignoreTerm {
				out = append(out, line+", exited 143")
				rt.exited(s, i, 143)
				continue
			}
			out = append(out, line+fmt.Sprintf(" ignored, SIGKILL at +%s", rel(p.killAt)))
			continue
		}
		out = append(out, fmt.Sprintf("+%s %s: SIGKILL, exited 137", rel(at), p.container))
		rt.exited(s, i, 137)
	}
	s.Now = now
	return out
}

// next is the pending stop whose next step comes first.
func (rt *fakeRuntime) next() (int, time.Time) {
	best, at := -1, time.Time{}
	for i, p := range rt.pending {
		t := p.signalAt
		if p.signalled {
			t = p.killAt
		}
		if best < 0 || t.Before(at) {
			best, at = i, t
		}
	}
	return best, at
}

func (rt *fakeRuntime) exited(s *Snapshot, i int, code int32) {
	name := rt.pending[i].container
	rt.pending = append(rt.pending[:i], rt.pending[i+1:]...)
	r := s.Containers[name]
	cur := *r.Current
	cur.State, cur.ExitCode, cur.FinishedAt = StateExited, code, s.Now
	r.Current, r.Stopping = &cur, false
	s.Containers[name] = r
}

// exit is a process ending on its own.
func (rt *fakeRuntime) exit(s *Snapshot, name string, code int32, reason string) error {
	r := s.Containers[name]
	if r.Current == nil || r.Current.State != StateRunning {
		return fmt.Errorf("exit %s: not running", name)
	}
	for i, p := range rt.pending {
		if p.container == name {
			rt.pending = append(rt.pending[:i], rt.pending[i+1:]...)
			break
		}
	}
	cur := *r.Current
	cur.State, cur.ExitCode, cur.FinishedAt, cur.Reason = StateExited, code, s.Now, reason
	r.Current, r.Stopping = &cur, false
	s.Containers[name] = r
	return nil
}

// sandboxDies: the pod's sandbox stops behind the agent's back; its
// containers keep running until stopped, as instances of an old sandbox.
func sandboxDies(s *Snapshot) {
	s.SandboxReady = false
	for n, r := range s.Containers {
		for _, in := range []**Instance{&r.Current, &r.Previous} {
			if *in != nil {
				c := **in
				c.OldSandbox = true
				*in = &c
			}
		}
		s.Containers[n] = r
	}
}
