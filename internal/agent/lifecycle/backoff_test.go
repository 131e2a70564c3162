package lifecycle

import (
	"slices"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// crashLoop runs a container that crashes runFor after each start, n times,
// and returns the delay before each restart, measured from the crash.
func crashLoop(t *testing.T, m *sim, runFor time.Duration, n int) []time.Duration {
	t.Helper()
	var delays []time.Duration
	for range n {
		m.advance(runFor)
		m.exit("c1", 1)
		crashed := m.s.Now
		for m.step(); len(m.plan.Actions) == 0; m.step() {
			if m.plan.WakeAt.IsZero() {
				t.Fatalf("in back-off without WakeAt")
			}
			m.s.Now = m.plan.WakeAt
		}
		m.expectActions("start c1#" + itoa(m.status("c1").RestartCount+1))
		delays = append(delays, m.s.Now.Sub(crashed))
	}
	return delays
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }

func secs(ss ...int) []time.Duration {
	var out []time.Duration
	for _, s := range ss {
		out = append(out, time.Duration(s)*time.Second)
	}
	return out
}

func TestBackOffSchedule(t *testing.T) {
	m := newSim(t, newPod(containers("c1")), DefaultConfig())
	m.step()
	m.expectActions("start c1#0")

	got := crashLoop(t, m, time.Second, 8)
	if want := secs(0, 10, 20, 40, 80, 160, 300, 300); !slices.Equal(got, want) {
		t.Errorf("§4: delays = %v, want %v", got, want)
	}

	// §4: the back-off resets once the container ran 10 minutes without crashing.
	got = crashLoop(t, m, 11*time.Minute, 1)
	got = append(got, crashLoop(t, m, time.Second, 2)...)
	if want := secs(0, 10, 20); !slices.Equal(got, want) {
		t.Errorf("§4: delays after a 10-minute run = %v, want %v", got, want)
	}
}

func TestBackOffConfigurableCap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBackOff = 2 * time.Second // crashLoopBackOff.maxContainerRestartPeriod: 2s
	m := newSim(t, newPod(containers("c1")), cfg)
	m.step()
	got := crashLoop(t, m, time.Second, 5)
	if want := secs(0, 2, 2, 2, 2); !slices.Equal(got, want) {
		t.Errorf("§4: initial delay lowered to the cap: delays = %v, want %v", got, want)
	}
}

func TestBackOffStatusAndEvent(t *testing.T) {
	m := newSim(t, newPod(containers("c1")), DefaultConfig())
	m.step()
	crashLoop(t, m, time.Second, 2) // delays 0 then 10s; the next one is 20s
	m.log = nil
	m.advance(time.Second)
	m.exit("c1", 1)
	crashed := m.s.Now
	m.step()

	m.expectActions("")
	st := m.status("c1")
	if st.State.Waiting == nil || st.State.Waiting.Reason != "CrashLoopBackOff" ||
		st.State.Waiting.Message != "back-off 20s restarting failed container=c1 pod=p_ns(u)" {
		t.Errorf("§4: state = %+v", st.State)
	}
	if got := stateString(st.LastTerminationState); got != "terminated:Error(1)" {
		t.Errorf("§4: lastState = %s", got)
	}
	if !m.plan.WakeAt.Equal(crashed.Add(20 * time.Second)) {
		t.Errorf("§4: WakeAt = %s, want crash + 20s", m.plan.WakeAt.Sub(crashed))
	}
	want := []Event{{Container: "c1", Type: v1.EventTypeWarning, Reason: "BackOff",
		Message: "Back-off restarting failed container c1 in pod p_ns(u)"}}
	if !slices.Equal(m.log, want) {
		t.Errorf("§4: events = %+v, want %+v", m.log, want)
	}
	if m.phase() != v1.PodRunning {
		t.Errorf("phase = %s", m.phase())
	}

	// Computing again during the same back-off gives no second event.
	m.advance(5 * time.Second)
	m.step()
	if len(m.log) != 1 {
		t.Errorf("§4: one crash, one BackOff event; got %+v", m.log)
	}
}

func TestBackOffPrimitives(t *testing.T) {
	cfg := DefaultConfig()
	tests := []struct {
		name     string
		e        BackOffEntry
		found    bool
		finished time.Time
		now      time.Time
		wantIn   bool
		wantNext time.Duration
	}{
		{name: "§4: no entry -> restart now, next delay 10s",
			finished: t0, now: t0, wantNext: 10 * time.Second},
		{name: "§4: within the delay -> in back-off, next doubles",
			e: BackOffEntry{Delay: 10 * time.Second, LastUpdate: t0}, found: true,
			finished: t0.Add(time.Second), now: t0.Add(10 * time.Second), wantIn: true, wantNext: 20 * time.Second},
		{name: "§4: delay over -> restart",
			e: BackOffEntry{Delay: 10 * time.Second, LastUpdate: t0}, found: true,
			finished: t0.Add(time.Second), now: t0.Add(11 * time.Second), wantNext: 20 * time.Second},
		{name: "§4: capped at MaxBackOff",
			e: BackOffEntry{Delay: 300 * time.Second, LastUpdate: t0}, found: true,
			finished: t0.Add(time.Second), now: t0.Add(2 * time.Second), wantIn: true, wantNext: 300 * time.Second},
		{name: "§4: crash more than 10 minutes after the last update -> reset",
			e: BackOffEntry{Delay: 300 * time.Second, LastUpdate: t0}, found: true,
			finished: t0.Add(10*time.Minute + time.Second), now: t0.Add(10*time.Minute + time.Second), wantNext: 10 * time.Second},
		{name: "§4: crash exactly 10 minutes after the last update -> no reset",
			e: BackOffEntry{Delay: 40 * time.Second, LastUpdate: t0}, found: true,
			finished: t0.Add(10 * time.Minute), now: t0.Add(10 * time.Minute), wantIn: true, wantNext: 80 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, in := cfg.backOffUntil(tc.e, tc.found, tc.finished, tc.now)
			if in != tc.wantIn {
				t.Errorf("in back-off = %v, want %v", in, tc.wantIn)
			}
			next := cfg.nextBackOff(tc.e, tc.found, tc.finished, tc.now)
			if next.Delay != tc.wantNext || !next.LastUpdate.Equal(tc.now) {
				t.Errorf("next = %+v, want delay %s at now", next, tc.wantNext)
			}
		})
	}
}

func TestConfigNormalized(t *testing.T) {
	if got := (Config{}).normalized(); got != DefaultConfig() {
		t.Errorf("zero Config -> %+v, want defaults", got)
	}
	if got := (Config{InitialBackOff: 10 * time.Second, MaxBackOff: time.Second}).normalized(); got.InitialBackOff != time.Second {
		t.Errorf("§4: initial delay lowered to the cap: %+v", got)
	}
}
