package timeline

import (
	"encoding/json"
	"time"
)

// Trace is t in Chrome's trace event format (JSON), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open: one track for the pod and one
// per container, a slice per container state (waiting, running,
// terminated) and an instant mark per other entry. Times are microseconds
// since the first entry.
func Trace(t Timeline) ([]byte, error) {
	type event struct {
		Name string            `json:"name"`
		Ph   string            `json:"ph"`
		Ts   int64             `json:"ts"`
		Dur  int64             `json:"dur,omitempty"`
		Pid  int               `json:"pid"`
		Tid  int               `json:"tid"`
		S    string            `json:"s,omitempty"`
		Args map[string]string `json:"args,omitempty"`
	}
	out := struct {
		TraceEvents     []event `json:"traceEvents"`
		DisplayTimeUnit string  `json:"displayTimeUnit"`
	}{TraceEvents: []event{}, DisplayTimeUnit: "ms"}
	if len(t.Entries) == 0 {
		return json.Marshal(out)
	}
	origin := t.Entries[0].Time
	us := func(at time.Time) int64 { return at.Sub(origin).Microseconds() }
	tids := map[string]int{"": 0}
	name := func(tid int, n string) {
		out.TraceEvents = append(out.TraceEvents, event{Name: "thread_name", Ph: "M", Pid: 1, Tid: tid, Args: map[string]string{"name": n}})
	}
	out.TraceEvents = append(out.TraceEvents, event{Name: "process_name", Ph: "M", Pid: 1, Args: map[string]string{"name": t.Namespace + "/" + t.Name}})
	name(0, "pod")
	tid := func(container string) int {
		id, ok := tids[container]
		if !ok {
			id = len(tids)
			tids[container] = id
			name(id, container)
		}
		return id
	}
	// open is each container's current state slice: where it began.
	type slice struct {
		label string
		start time.Time
		args  map[string]string
	}
	open := map[string]*slice{}
	closeSlice := func(container string, at time.Time) {
		if s := open[container]; s != nil {
			out.TraceEvents = append(out.TraceEvents, event{Name: s.label, Ph: "X", Ts: us(s.start), Dur: max(1, us(at)-us(s.start)), Pid: 1, Tid: tid(container), Args: s.args})
			delete(open, container)
		}
	}
	end := t.Entries[len(t.Entries)-1].Time
	for _, e := range t.Entries {
		args := map[string]string{"kind": e.Kind}
		for k, v := range map[string]string{"state": e.State, "reason": e.Reason, "message": e.Message, "condition": e.Name} {
			if v != "" {
				args[k] = v
			}
		}
		if e.ExitCode != nil {
			args["exitCode"] = itoa(int(*e.ExitCode))
		}
		if e.Kind == KindContainer {
			closeSlice(e.Container, e.Time)
			label := e.State
			if e.Reason != "" {
				label += " (" + e.Reason + ")"
			}
			open[e.Container] = &slice{label: label, start: e.Time, args: args}
			continue
		}
		label := e.Kind
		if e.Reason != "" {
			label += " " + e.Reason
		} else if e.State != "" {
			label += " " + e.Name + " " + e.State
		}
		out.TraceEvents = append(out.TraceEvents, event{Name: label, Ph: "i", S: "t", Ts: us(e.Time), Pid: 1, Tid: tid(e.Container), Args: args})
	}
	for c := range open {
		closeSlice(c, end)
	}
	return json.Marshal(out)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
